// The op table: gathers the op family definitions and answers lookups.
#include "ir/op_table.h"

#include <array>
#include <unordered_map>

namespace cleave {
namespace {

constexpr std::array<std::string_view, kNumOps> kOpNames = {
#define CLEAVE_OP_NAME(id, name) name,
    CLEAVE_ALL_OPS(CLEAVE_OP_NAME)
#undef CLEAVE_OP_NAME
};

// The family whose header lists each id.
constexpr std::array<OpFamily, kNumOps> kListedFamily = {
#define CLEAVE_LINEAR_ALGEBRA(id, name) OpFamily::kLinearAlgebra,
#define CLEAVE_ELEMENTWISE(id, name) OpFamily::kElementwise,
#define CLEAVE_REDUCTION(id, name) OpFamily::kReduction,
#define CLEAVE_CONVOLUTION(id, name) OpFamily::kConvolution,
#define CLEAVE_SHAPE(id, name) OpFamily::kShape,
#define CLEAVE_LOSS(id, name) OpFamily::kLoss,
#define CLEAVE_GRADIENT(id, name) OpFamily::kGradient,
#define CLEAVE_OPTIMIZER(id, name) OpFamily::kOptimizer,
#define CLEAVE_COMMUNICATION(id, name) OpFamily::kCommunication,
#define CLEAVE_FUSED(id, name) OpFamily::kFused,
    CLEAVE_LINEAR_ALGEBRA_OPS(CLEAVE_LINEAR_ALGEBRA) CLEAVE_ELEMENTWISE_OPS(CLEAVE_ELEMENTWISE)
    CLEAVE_REDUCTION_OPS(CLEAVE_REDUCTION) CLEAVE_CONVOLUTION_OPS(CLEAVE_CONVOLUTION) CLEAVE_SHAPE_OPS(CLEAVE_SHAPE)
    CLEAVE_LOSS_OPS(CLEAVE_LOSS) CLEAVE_GRADIENT_OPS(CLEAVE_GRADIENT) CLEAVE_OPTIMIZER_OPS(CLEAVE_OPTIMIZER)
    CLEAVE_COMMUNICATION_OPS(CLEAVE_COMMUNICATION) CLEAVE_FUSED_OPS(CLEAVE_FUSED)
#undef CLEAVE_LINEAR_ALGEBRA
#undef CLEAVE_ELEMENTWISE
#undef CLEAVE_REDUCTION
#undef CLEAVE_CONVOLUTION
#undef CLEAVE_SHAPE
#undef CLEAVE_LOSS
#undef CLEAVE_GRADIENT
#undef CLEAVE_OPTIMIZER
#undef CLEAVE_COMMUNICATION
#undef CLEAVE_FUSED
};

// "op table: <what>: <op>".
Status tableError(const char* what, std::string_view name) {
  return Status::internal("op table: " + std::string(what) + ": " + std::string(name));
}

struct OpTable {
  std::vector<OpDef> defs;  // indexed by OpId
  std::unordered_map<std::string_view, OpId> by_name;
  Status status;  // the first inconsistency (a build bug), or ok

  OpTable() {
    std::vector<OpDef> added;
    auto add_family = [&added](OpFamily family, void (*add)(std::vector<OpDef>&)) {
      size_t first = added.size();
      add(added);
      for (size_t i = first; i < added.size(); ++i) added[i].family = family;
    };
    add_family(OpFamily::kElementwise, ops::addElementwiseOps);
    add_family(OpFamily::kLinearAlgebra, ops::addLinearAlgebraOps);
    add_family(OpFamily::kReduction, ops::addReductionOps);
    add_family(OpFamily::kConvolution, ops::addConvolutionOps);
    add_family(OpFamily::kShape, ops::addShapeOps);
    add_family(OpFamily::kLoss, ops::addLossOps);
    add_family(OpFamily::kGradient, ops::addGradientOps);
    add_family(OpFamily::kOptimizer, ops::addOptimizerOps);
    add_family(OpFamily::kCommunication, ops::addCommunicationOps);
    add_family(OpFamily::kFused, ops::addFusedOps);
    status = checkOpDefinitions(added);
    // Each id gets its definition; on a broken table (status not ok) an id may keep an empty one.
    defs.resize(kNumOps);
    for (int i = 0; i < kNumOps; ++i) {
      defs[i].id = static_cast<OpId>(i);
      defs[i].name = kOpNames[i];
      defs[i].family = kListedFamily[i];
    }
    for (auto& def : added) defs[static_cast<int>(def.id)] = std::move(def);
    for (int i = 0; i < kNumOps; ++i) by_name.emplace(kOpNames[i], static_cast<OpId>(i));
  }
};

}  // namespace

std::string_view opFamilyName(OpFamily family) {
  switch (family) {
    case OpFamily::kElementwise: return "elementwise";
    case OpFamily::kLinearAlgebra: return "linear_algebra";
    case OpFamily::kReduction: return "reduction";
    case OpFamily::kConvolution: return "convolution";
    case OpFamily::kShape: return "shape";
    case OpFamily::kLoss: return "loss";
    case OpFamily::kGradient: return "gradient";
    case OpFamily::kOptimizer: return "optimizer";
    case OpFamily::kCommunication: return "communication";
    case OpFamily::kFused: return "fused";
  }
  return "unknown";
}

namespace {

const OpTable& table() {
  static const OpTable instance;
  return instance;
}

template <class T>
const T& attrOrDefault(const OpContext& ctx, std::string_view name) {
  auto it = ctx.attrs.find(std::string(name));
  if (it != ctx.attrs.end() && std::holds_alternative<T>(it->second)) return std::get<T>(it->second);
  const AttrSpec* spec = ctx.def.findAttr(name);
  if (spec && std::holds_alternative<T>(spec->default_value)) return std::get<T>(spec->default_value);
  static const T kEmpty{};
  return kEmpty;
}

}  // namespace

const AttrSpec* OpDef::findAttr(std::string_view attr_name) const {
  for (const auto& spec : attrs)
    if (spec.name == attr_name) return &spec;
  return nullptr;
}

int64_t OpContext::getInt(std::string_view name) const { return attrOrDefault<int64_t>(*this, name); }
double OpContext::getFloat(std::string_view name) const { return attrOrDefault<double>(*this, name); }
const std::string& OpContext::getString(std::string_view name) const {
  return attrOrDefault<std::string>(*this, name);
}
const std::vector<int64_t>& OpContext::getInts(std::string_view name) const {
  return attrOrDefault<std::vector<int64_t>>(*this, name);
}
const std::vector<double>& OpContext::getFloats(std::string_view name) const {
  return attrOrDefault<std::vector<double>>(*this, name);
}
const TensorData* OpContext::getTensor(std::string_view name) const {
  return attrOrDefault<std::shared_ptr<const TensorData>>(*this, name).get();
}
const Attribute& OpContext::get(std::string_view name) const {
  auto it = attrs.find(std::string(name));
  if (it != attrs.end()) return it->second;
  const AttrSpec* spec = def.findAttr(name);
  static const Attribute kNone = int64_t{0};
  return spec ? spec->default_value : kNone;
}

const OpDef& opDef(OpId id) { return table().defs[static_cast<int>(id)]; }

std::optional<CommKind> gradientCommunication(const OpDef& def, const AttrMap& attrs) {
  if (def.gradient_communication_rule) return def.gradient_communication_rule(OpContext{def, {}, {}, attrs});
  return def.gradient_communication;
}

std::optional<OpId> lookupOp(std::string_view name) {
  auto it = table().by_name.find(name);
  if (it == table().by_name.end()) return std::nullopt;
  return it->second;
}

std::string_view opName(OpId id) { return kOpNames[static_cast<int>(id)]; }

std::span<const OpDef> allOpDefs() { return table().defs; }

Status opTableStatus() { return table().status; }

Status checkOpDefinitions(std::span<const OpDef> defs) {
  std::vector<bool> seen(kNumOps, false);
  for (const auto& def : defs) {
    int i = static_cast<int>(def.id);
    if (i < 0 || i >= kNumOps) return tableError("op id out of range", def.name);
    if (def.name.empty()) return tableError("op's properties set before its family defined it", kOpNames[i]);
    if (seen[i]) return tableError("op defined twice", kOpNames[i]);
    if (def.name != kOpNames[i]) return tableError("op name differs from its id's name", def.name);
    if (def.family != kListedFamily[i])
      return tableError("op defined by another family than the one whose header lists it", def.name);
    if (!def.shape || !def.cost || !def.sharding) return tableError("op lacks a shape, cost or sharding rule", def.name);
    seen[i] = true;
  }
  for (int i = 0; i < kNumOps; ++i)
    if (!seen[i]) return tableError("op has no definition", kOpNames[i]);
  return Status::ok();
}

Status checkAttributes(const OpDef& def, const AttrMap& attrs) {
  for (const auto& [name, value] : attrs) {
    const AttrSpec* spec = def.findAttr(name);
    if (!spec) {
      std::string known;
      for (const auto& s : def.attrs) known += (known.empty() ? "" : ", ") + s.name;
      return Status::badInput(std::string(def.name) + " has no attribute '" + name + "'" +
                              (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
    }
    AttrKind kind = attrKind(value);
    bool ok = kind == spec->kind ||
              // an empty list parses as ints; accept it for floats too
              (spec->kind == AttrKind::kFloats && kind == AttrKind::kInts &&
               std::get<std::vector<int64_t>>(value).empty());
    if (!ok)
      return Status::badInput(std::string(def.name) + " attribute '" + name + "' must be " +
                              attrKindName(spec->kind) + ", got " + attrKindName(kind));
  }
  for (const auto& spec : def.attrs)
    if (spec.required && !attrs.count(spec.name))
      return Status::badInput(std::string(def.name) + " needs attribute '" + spec.name + "'");
  return Status::ok();
}

Expected<std::vector<TensorType>> inferResultTypes(const OpDef& def, std::span<const TensorType> operands,
                                                   const AttrMap& attrs) {
  int n = static_cast<int>(operands.size());
  if (n < def.min_operands || (def.max_operands >= 0 && n > def.max_operands)) {
    std::string want = def.max_operands < 0                 ? "at least " + std::to_string(def.min_operands)
                       : def.min_operands == def.max_operands ? std::to_string(def.min_operands)
                                                             : std::to_string(def.min_operands) + " to " +
                                                                   std::to_string(def.max_operands);
    return Status::badInput(std::string(def.name) + " takes " + want + " operand(s), got " + std::to_string(n));
  }
  CLEAVE_TRY(checkAttributes(def, attrs));
  if (!def.shape) return Status::internal(std::string(def.name) + " has no shape rule (" + opTableStatus().message() + ")");
  OpContext ctx{def, operands, {}, attrs};
  return def.shape(ctx);
}

}  // namespace cleave
