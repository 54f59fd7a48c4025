// The op harness's cases, declared once per op family (tests/ops/<family>_cases.cpp).
#pragma once

#include <map>

#include "tests/ops/op_harness.h"

namespace cleave::op_harness {

CaseList elementwiseCases();
CaseList linearAlgebraCases();
CaseList reductionCases();
CaseList convolutionCases();
CaseList shapeCases();
CaseList lossCases();
CaseList gradientCases();
CaseList optimizerCases();
CaseList fusedCases();

// Every family's cases, grouped by op (built once).
const std::map<OpId, CaseList>& casesByOp();

}  // namespace cleave::op_harness
