// Collects every family's cases by op.
#include "tests/ops/op_cases.h"

namespace cleave::op_harness {

const std::map<OpId, CaseList>& casesByOp() {
  static const std::map<OpId, CaseList> by_op = [] {
    std::map<OpId, CaseList> grouped;
    for (CaseList (*family)() : {elementwiseCases, linearAlgebraCases, reductionCases, convolutionCases, shapeCases,
                                 lossCases, gradientCases, optimizerCases, fusedCases})
      for (OpCase& c : family()) grouped[c.op].push_back(std::move(c));
    return grouped;
  }();
  return by_op;
}

}  // namespace cleave::op_harness
