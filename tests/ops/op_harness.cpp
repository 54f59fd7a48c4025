// The op harness core: references, CPU kernel runs, comparisons, the gradient check and perf timing.
#include "tests/ops/op_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "ir/graph.h"
#include "ir/sharding_rule.h"
#include "passes/training/autodiff.h"
#include "runtime/device/element_access.h"
#include "runtime/device/kernel.h"
#include "tests/unit/graph_interpreter.h"

namespace cleave::op_harness {
namespace {

// Finite-difference step and tolerance of the gradient check (f64 throughout).
constexpr double kGradientStep = 1e-6;
constexpr double kGradientTolerance = 1e-6;
// Cases with more differentiated elements than this skip the gradient check (runtime budget).
constexpr int64_t kMaxGradientElements = 1024;

TensorData emptyTensor(const TensorType& type) {
  return TensorData{type, std::vector<uint8_t>(static_cast<size_t>(type.bytes()), 0)};
}

double elementAt(const TensorData& t, int64_t i) { return runtime::loadElement(t.type.dtype, t.bytes.data(), i); }

// `t` with every element converted to `dtype`.
TensorData converted(const TensorData& t, DType dtype) {
  TensorData out = emptyTensor(TensorType{dtype, t.type.shape});
  for (int64_t i = 0; i < t.type.numel(); ++i) runtime::storeElement(dtype, out.bytes.data(), i, elementAt(t, i));
  return out;
}

bool isDifferentiable(DType d) { return d == DType::kF32 || d == DType::kF64; }

}  // namespace

std::string OpCase::describe() const {
  std::string text = std::string(opName(op)) + " " + label + " (";
  for (size_t i = 0; i < operands.size(); ++i) text += (i ? ", " : "") + operands[i].type.str();
  return text + ")";
}

// ---- CaseBuilder ----

TensorData CaseBuilder::uniform(DType dtype, Shape shape, double low, double high) {
  TensorData t = emptyTensor(TensorType{dtype, std::move(shape)});
  std::uniform_real_distribution<double> dist(low, high);
  for (int64_t i = 0; i < t.type.numel(); ++i) runtime::storeElement(dtype, t.bytes.data(), i, dist(rng_));
  return t;
}

TensorData CaseBuilder::awayFromZero(DType dtype, Shape shape, double low, double high) {
  TensorData t = emptyTensor(TensorType{dtype, std::move(shape)});
  std::uniform_real_distribution<double> dist(low, high);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < t.type.numel(); ++i)
    runtime::storeElement(dtype, t.bytes.data(), i, (sign(rng_) ? -1 : 1) * dist(rng_));
  return t;
}

TensorData CaseBuilder::integers(DType dtype, Shape shape, int64_t low, int64_t high) {
  TensorData t = emptyTensor(TensorType{dtype, std::move(shape)});
  std::uniform_int_distribution<int64_t> dist(low, high);
  for (int64_t i = 0; i < t.type.numel(); ++i)
    runtime::storeElement(dtype, t.bytes.data(), i, static_cast<double>(dist(rng_)));
  return t;
}

TensorData CaseBuilder::values(DType dtype, Shape shape, const std::vector<double>& values) {
  TensorData t = emptyTensor(TensorType{dtype, std::move(shape)});
  for (int64_t i = 0; i < t.type.numel() && i < static_cast<int64_t>(values.size()); ++i)
    runtime::storeElement(dtype, t.bytes.data(), i, values[i]);
  return t;
}

OpCase& CaseBuilder::add(OpId op, std::string label, std::vector<TensorData> operands, AttrMap attrs) {
  OpCase& c = cases_.emplace_back();
  c.op = op;
  c.label = std::move(label);
  c.operands = std::move(operands);
  c.attrs = std::move(attrs);
  return c;
}

OpCase& CaseBuilder::addWithoutGradient(OpId op, std::string label, std::vector<TensorData> operands, AttrMap attrs,
                                        std::string reason) {
  OpCase& c = add(op, std::move(label), std::move(operands), std::move(attrs));
  c.gradient_check = false;
  c.no_gradient_reason = std::move(reason);
  return c;
}

// ---- Running ----

Expected<std::vector<TensorType>> resultTypes(const OpCase& c) {
  std::vector<TensorType> types;
  for (const TensorData& t : c.operands) types.push_back(t.type);
  return inferResultTypes(opDef(c.op), types, c.attrs);
}

std::optional<Expected<std::vector<TensorData>>> referenceResults(OpId op, const AttrMap& attrs,
                                                                  const std::vector<TensorData>& operands,
                                                                  const std::vector<TensorType>& result_types) {
  std::vector<TensorType> operand_types;
  std::vector<const TensorData*> pointers;
  for (const TensorData& t : operands) {
    operand_types.push_back(t.type);
    pointers.push_back(&t);
  }
  const OpDef& def = opDef(op);
  const OpContext ctx{def, operand_types, result_types, attrs};
  if (def.reference && (!def.reference_supports || def.reference_supports(ctx))) return def.reference(ctx, pointers);
  return std::nullopt;
}

std::string checkShardingRule(const OpCase& c) {
  const OpDef& def = opDef(c.op);
  auto results = resultTypes(c);
  if (!results) return "invalid case: " + results.status().message();
  std::vector<TensorType> operands;
  for (const TensorData& t : c.operands) operands.push_back(t.type);
  const ShardingRule rule = def.sharding(OpContext{def, operands, *results, c.attrs});
  if (rule.factor_sizes.size() != rule.factor_kinds.size()) return "factor sizes and kinds differ in number";
  auto check = [&](const std::vector<std::vector<int>>& dims, const std::vector<TensorType>& types,
                   const char* side) -> std::string {
    if (dims.size() != types.size())
      return std::to_string(dims.size()) + " " + side + " dim lists for " + std::to_string(types.size()) + " " + side + "s";
    for (size_t t = 0; t < types.size(); ++t) {
      if (static_cast<int64_t>(dims[t].size()) != types[t].rank())
        return std::string(side) + " " + std::to_string(t) + " has " + std::to_string(dims[t].size()) +
               " dim entries for rank " + std::to_string(types[t].rank());
      for (size_t d = 0; d < dims[t].size(); ++d) {
        const int f = dims[t][d];
        if (f == ShardingRule::kNoFactor) continue;
        if (f < 0 || f >= rule.numFactors())
          return std::string(side) + " " + std::to_string(t) + " dim " + std::to_string(d) + ": no factor " + std::to_string(f);
        if (rule.factor_sizes[f] != types[t].shape[d])
          return std::string(side) + " " + std::to_string(t) + " dim " + std::to_string(d) + " has size " +
                 std::to_string(types[t].shape[d]) + " but its factor has size " + std::to_string(rule.factor_sizes[f]) +
                 " (" + rule.str() + ")";
      }
    }
    return "";
  };
  std::string problem = check(rule.operand_dims, operands, "operand");
  return problem.empty() ? check(rule.result_dims, *results, "result") : problem;
}

Expected<CpuCall> CpuCall::prepare(const OpCase& c, int threads) {
  CpuCall call;
  call.case_ = &c;
  call.threads_ = threads;
  CLEAVE_ASSIGN_OR_RETURN(call.result_types_, resultTypes(c));
  if (!runtime::findCpuKernel(c.op)) return Status::internal("no cpu kernel for " + std::string(opName(c.op)));
  for (const TensorData& t : c.operands) call.operand_types_.push_back(t.type);
  for (const TensorType& type : call.result_types_) call.buffers_.emplace_back(static_cast<size_t>(type.bytes() + 16), 0xFF);
  return call;
}

Status CpuCall::run() {
  // Kernels get arena addresses in plans, never null: an empty operand points at this placeholder.
  alignas(64) static const uint8_t empty_tensor[64] = {};
  std::vector<const void*> inputs;
  for (const TensorData& t : case_->operands) inputs.push_back(t.bytes.empty() ? empty_tensor : t.bytes.data());
  std::vector<void*> outputs;
  for (std::vector<uint8_t>& buffer : buffers_) outputs.push_back(buffer.data());
  runtime::KernelCall call{OpContext{opDef(case_->op), operand_types_, result_types_, case_->attrs}, inputs, outputs,
                           threads_};
  return runtime::findCpuKernel(case_->op)(call);
}

std::vector<TensorData> CpuCall::results() const {
  std::vector<TensorData> results;
  for (size_t i = 0; i < result_types_.size(); ++i)
    results.push_back(TensorData{result_types_[i], std::vector<uint8_t>(buffers_[i].begin(),
                                                                        buffers_[i].begin() + result_types_[i].bytes())});
  return results;
}

Expected<std::vector<TensorData>> runCpuKernel(const OpCase& c, int threads) {
  CLEAVE_ASSIGN_OR_RETURN(CpuCall call, CpuCall::prepare(c, threads));
  CLEAVE_TRY(call.run());
  return call.results();
}

Tolerance defaultTolerance(DType dtype, bool device_slack) {
  switch (dtype) {
    case DType::kF32: return device_slack ? Tolerance{1e-4, 1e-5} : Tolerance{1e-5, 2e-6};
    case DType::kF64: return device_slack ? Tolerance{1e-10, 1e-12} : Tolerance{1e-11, 1e-12};
    case DType::kF16: return {2e-3, 1e-4};
    case DType::kBF16: return {1e-2, 1e-3};
    default: return {0, 0};
  }
}

std::string compareTensors(const TensorData& actual, const TensorData& expected, Tolerance tolerance) {
  if (actual.type != expected.type) return "type " + actual.type.str() + ", expected " + expected.type.str();
  std::ostringstream out;
  int reported = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < actual.type.numel(); ++i) {
    const double a = elementAt(actual, i), e = elementAt(expected, i);
    const bool ok = (std::isnan(e) && std::isnan(a)) || a == e || std::abs(a - e) <= tolerance.atol + tolerance.rtol * std::abs(e);
    if (ok) continue;
    ++bad;
    if (reported++ < 4) out << " [" << i << "] " << a << " vs " << e << ";";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(actual.type.numel()) + " elements differ:" + out.str();
}

bool isCommunicationOp(OpId op) {
  return opDef(op).family == OpFamily::kCommunication;
}

// ---- The gradient check ----

std::string checkGradient(const OpCase& c, bool& applies) {
  applies = false;
  const OpDef& def = opDef(c.op);
  if (!def.gradient || !c.gradient_check) return "";
  auto forward_types = resultTypes(c);
  if (!forward_types) return forward_types.status().message();
  for (const TensorType& t : *forward_types)
    if (!isDifferentiable(t.dtype)) return "";
  // 1. Operands in f64 (float ones); the differentiated ones and their element count.
  std::vector<TensorData> operands;
  std::vector<bool> differentiated(c.operands.size(), false);
  int64_t elements = 0;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const TensorData& t = c.operands[i];
    const bool float_operand = isDifferentiable(t.type.dtype);
    operands.push_back(float_operand ? converted(t, DType::kF64) : t);
    const bool wanted = c.gradient_operands.empty()
                            ? float_operand
                            : std::find(c.gradient_operands.begin(), c.gradient_operands.end(), static_cast<int>(i)) !=
                                  c.gradient_operands.end();
    if (!wanted) continue;
    for (int64_t e = 0; e < t.type.numel(); ++e)
      if (!std::isfinite(elementAt(t, e))) return "";  // NaN or infinity: no derivative to check
    differentiated[i] = true;
    elements += t.type.numel();
  }
  if (elements == 0 || elements > kMaxGradientElements) return "";
  applies = true;
  // 2. The reference on f64 operands, with float results unrounded (f64).
  std::vector<TensorType> types;
  for (const TensorData& t : operands) types.push_back(t.type);
  auto graph_results = inferResultTypes(def, types, c.attrs);
  if (!graph_results) return "f64 operands: " + graph_results.status().message();
  std::vector<TensorType> reference_types = *graph_results;
  if (def.reference)
    for (TensorType& t : reference_types) t.dtype = DType::kF64;
  else if (std::any_of(reference_types.begin(), reference_types.end(), [](const TensorType& t) { return t.dtype != DType::kF64; })) {
    applies = false;
    return "";  // no reference computes unrounded results here, and rounding hides the derivative
  }
  // 3. Fixed random cotangents, one per result (in the result's dtype, so the graph sees the same values).
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<TensorData> cotangents;
  for (const TensorType& t : *graph_results) {
    TensorData cot = emptyTensor(t);
    for (int64_t e = 0; e < t.numel(); ++e) runtime::storeElement(t.dtype, cot.bytes.data(), e, dist(rng));
    cotangents.push_back(std::move(cot));
  }
  // 4. The graph: y = op(x..); loss = Σ_k reduce_sum(y_k · cot_k); its backward, evaluated on the CPU.
  Graph graph;
  test::TensorMap feeds;
  std::vector<ValueId> values, wrt;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    const bool float_operand = isDifferentiable(operands[i].type.dtype);
    auto v = float_operand ? graph.addParam(name, operands[i].type, Initializer{}, differentiated[i])
                           : graph.addInput(name, operands[i].type);
    if (!v) return v.status().message();
    values.push_back(*v);
    if (differentiated[i]) wrt.push_back(*v);
    feeds[name] = operands[i];
  }
  auto ys = graph.addNode(c.op, values, c.attrs);
  if (!ys) return "forward node: " + ys.status().message();
  ValueId loss = kNoValue;
  for (size_t k = 0; k < ys->size(); ++k) {
    const std::string name = "cot" + std::to_string(k);
    auto cot = graph.addParam(name, cotangents[k].type, Initializer{}, false);
    if (!cot) return cot.status().message();
    feeds[name] = cotangents[k];
    auto weighted = graph.addNode(OpId::mul, {(*ys)[k], *cot});
    if (!weighted) return weighted.status().message();
    ValueId term = graph.addNode(OpId::reduce_sum, {(*weighted)[0]}, {{"keepdims", int64_t{0}}}).value()[0];
    if (graph.values[term].type.dtype != DType::kF64)
      term = graph.addNode(OpId::cast, {term}, {{"to", std::string("f64")}}).value()[0];
    loss = loss == kNoValue ? term : graph.addNode(OpId::add, {loss, term}).value()[0];
  }
  graph.outputs = {loss};
  Status backward = appendBackward(graph, loss, AutodiffOptions{wrt});
  if (!backward) return "autodiff: " + backward.message();
  auto evaluated = test::evaluateGraph(graph, feeds);
  if (!evaluated) return "evaluating the backward graph: " + evaluated.status().message();
  // 5. Central differences of the reference, element by element.
  auto objective = [&](const std::vector<TensorData>& at, std::string& error) {
    auto results = referenceResults(c.op, c.attrs, at, reference_types);
    if (!results || !*results) {
      error = results ? results->status().message() : "no reference";
      return 0.0;
    }
    double sum = 0;
    for (size_t k = 0; k < (*results)->size(); ++k)
      for (int64_t e = 0; e < cotangents[k].type.numel(); ++e) sum += elementAt(cotangents[k], e) * elementAt((**results)[k], e);
    return sum;
  };
  std::ostringstream failures;
  int reported = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!differentiated[i]) continue;
    auto grad = evaluated->find(gradientName("x" + std::to_string(i)));
    const TensorData* analytic = grad == evaluated->end() ? nullptr : &grad->second;  // none: zero
    std::vector<TensorData> at = operands;
    for (int64_t e = 0; e < operands[i].type.numel(); ++e) {
      const double original = elementAt(operands[i], e);
      std::string error;
      runtime::storeElement(DType::kF64, at[i].bytes.data(), e, original + kGradientStep);
      const double plus = objective(at, error);
      runtime::storeElement(DType::kF64, at[i].bytes.data(), e, original - kGradientStep);
      const double minus = objective(at, error);
      runtime::storeElement(DType::kF64, at[i].bytes.data(), e, original);
      if (!error.empty()) return "reference: " + error;
      const double expected = (plus - minus) / (2 * kGradientStep);
      const double actual = analytic ? elementAt(*analytic, e) : 0.0;
      if (std::abs(actual - expected) <= kGradientTolerance * (1 + std::abs(expected))) continue;
      if (reported++ < 4) failures << " operand " << i << " [" << e << "] autodiff " << actual << " vs " << expected << ";";
    }
  }
  return reported == 0 ? "" : std::to_string(reported) + " gradient elements differ from central differences:" + failures.str();
}

// ---- Perf mode ----

bool perfModeEnabled() {
  const char* value = std::getenv("CLEAVE_OP_HARNESS_PERF");
  return value != nullptr && std::string(value) == "1";
}

void reportPerf(const OpCase& c, const std::string& backend, const std::function<Status()>& run) {
  using Clock = std::chrono::steady_clock;
  if (Status first = run(); !first) {
    std::printf("perf %-6s %-60s failed: %s\n", backend.c_str(), c.describe().c_str(), first.message().c_str());
    return;
  }
  int64_t calls = 0;
  const auto start = Clock::now();
  double seconds = 0;
  while (seconds < 0.01) {
    (void)run();
    ++calls;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double per_call = seconds / static_cast<double>(calls);
  auto types = resultTypes(c);
  OpCost cost;
  const OpDef& def = opDef(c.op);
  if (types && def.cost) {
    std::vector<TensorType> operand_types;
    for (const TensorData& t : c.operands) operand_types.push_back(t.type);
    cost = def.cost(OpContext{def, operand_types, *types, c.attrs});
  }
  std::printf("perf %-6s %-60s %10.2f us %8.2f GB/s %8.2f GFLOP/s\n", backend.c_str(), c.describe().c_str(),
              per_call * 1e6, cost.bytes / per_call / 1e9, cost.flops / per_call / 1e9);
}

}  // namespace cleave::op_harness
