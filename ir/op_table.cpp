// The op table: gathers the op family definitions and answers lookups.
#include "ir/op_table.h"

#include <array>
#include <cstdio>
#include <unordered_map>

namespace cleave {
namespace {

constexpr std::array<std::string_view, kNumOps> kOpNames = {
#define CLEAVE_OP(id, name) name,
#include "ir/op_list.def"
#undef CLEAVE_OP
};

struct OpTable {
  std::vector<OpDef> defs;  // indexed by OpId
  std::unordered_map<std::string_view, OpId> by_name;

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
    // Every id in op_list.def must have exactly one definition: a broken table is a build bug.
    std::vector<bool> seen(kNumOps, false);
    for (const auto& def : added) {
      int i = static_cast<int>(def.id);
      if (seen[i]) fail("op defined twice", kOpNames[i]);
      if (def.name != kOpNames[i]) fail("op name differs from op_list.def", def.name);
      if (!def.shape || !def.cost || !def.sharding) fail("op lacks a shape, cost or sharding rule", def.name);
      seen[i] = true;
    }
    for (int i = 0; i < kNumOps; ++i)
      if (!seen[i]) fail("op has no definition", kOpNames[i]);
    defs.resize(kNumOps);
    for (auto& def : added) defs[static_cast<int>(def.id)] = std::move(def);
    ops::addGradientRules(defs);
    for (int i = 0; i < kNumOps; ++i) by_name.emplace(kOpNames[i], static_cast<OpId>(i));
  }
  [[noreturn]] static void fail(const char* what, std::string_view name) {
    std::fprintf(stderr, "cleave: internal error: op table: %s: %.*s\n", what, static_cast<int>(name.size()),
                 name.data());
    std::exit(4);
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

std::optional<OpId> lookupOp(std::string_view name) {
  auto it = table().by_name.find(name);
  if (it == table().by_name.end()) return std::nullopt;
  return it->second;
}

std::string_view opName(OpId id) { return kOpNames[static_cast<int>(id)]; }

std::span<const OpDef> allOpDefs() { return table().defs; }

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
  OpContext ctx{def, operands, {}, attrs};
  return def.shape(ctx);
}

}  // namespace cleave
