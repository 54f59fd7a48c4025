// Parameter initializers: deterministic seeded fills following torch.nn.init's formulas.
#include "runtime/train/initializers.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "runtime/device/element_access.h"
#include "runtime/train/random.h"

namespace cleave::runtime {
namespace {

// The arguments each kind accepts (besides `seed`).
const std::map<std::string, std::set<std::string>>& acceptedArgs() {
  static const std::map<std::string, std::set<std::string>> kArgs = {
      {"zeros", {}},
      {"ones", {}},
      {"constant", {"value"}},
      {"normal", {"mean", "std"}},
      {"uniform", {"low", "high"}},
      {"xavier_uniform", {"gain", "fan_in", "fan_out"}},
      {"xavier_normal", {"gain", "fan_in", "fan_out"}},
      {"kaiming_uniform", {"a", "mode", "nonlinearity", "fan_in", "fan_out"}},
      {"kaiming_normal", {"a", "mode", "nonlinearity", "fan_in", "fan_out"}},
      {"data", {}},
  };
  return kArgs;
}

std::string joined(const std::set<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none" : text;
}

// A numeric argument (int or float), or `fallback` when absent.
Expected<double> numberArg(const AttrMap& args, const std::string& name, double fallback) {
  auto it = args.find(name);
  if (it == args.end()) return fallback;
  if (const auto* f = std::get_if<double>(&it->second)) return *f;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return Status::badInput("argument '" + name + "' must be a number, not " + attrKindName(attrKind(it->second)));
}

Expected<std::string> stringArg(const AttrMap& args, const std::string& name, const std::string& fallback) {
  auto it = args.find(name);
  if (it == args.end()) return fallback;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  return Status::badInput("argument '" + name + "' must be a string, not " + attrKindName(attrKind(it->second)));
}

Expected<uint64_t> seedArg(const AttrMap& args) {
  auto it = args.find("seed");
  if (it == args.end()) return uint64_t{0};
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<uint64_t>(*i);
  return Status::badInput("argument 'seed' must be an int, not " + std::string(attrKindName(attrKind(it->second))));
}

// The error for a fan that is 0 (a zero-sized dim, or a rank < 2 tensor without the override).
Status fanError(const std::string& which, const TensorType& type) {
  return Status::badInput(which + " must be positive for " + type.str() +
                          (type.rank() < 2 ? " (rank < 2: give them as arguments)" : ""));
}

// Fills every element with values from `draw`, in row-major order.
template <class Draw>
void fill(const TensorType& type, void* out, Draw draw) {
  int64_t count = type.numel();
  for (int64_t i = 0; i < count; ++i) storeElement(type.dtype, out, i, draw());
}

void fillUniform(const TensorType& type, void* out, uint64_t seed, double low, double high) {
  Random random(seed);
  fill(type, out, [&] { return low + (high - low) * random.uniform(); });
}

void fillNormal(const TensorType& type, void* out, uint64_t seed, double mean, double std_dev) {
  Random random(seed);
  fill(type, out, [&] { return mean + std_dev * random.normal(); });
}

// Steps: check the arguments, then compute the distribution's parameters and fill.
Status runChecked(const InitializerSpec& spec, const TensorType& type, void* out) {
  const std::string& kind = spec.kind;
  auto accepted = acceptedArgs().find(kind);
  // 1. Every argument must be one the kind knows (a misspelt "stddev" must not pass silently).
  for (const auto& [name, value] : spec.args)
    if (name != "seed" && !accepted->second.count(name))
      return Status::badInput("unknown argument '" + name + "' (accepted: " + joined(accepted->second) + ", seed)");
  CLEAVE_ASSIGN_OR_RETURN(uint64_t seed, seedArg(spec.args));

  // 2. Kinds that work for every dtype.
  if (kind == "data") {
    if (static_cast<int64_t>(spec.data.size()) != type.bytes())
      return Status::badInput("holds " + std::to_string(spec.data.size()) + " bytes, " + type.str() + " needs " +
                              std::to_string(type.bytes()));
    if (!spec.data.empty()) std::memcpy(out, spec.data.data(), spec.data.size());
    return Status::ok();
  }
  if (kind == "zeros" || kind == "ones" || kind == "constant") {
    double value = kind == "ones" ? 1.0 : 0.0;
    if (kind == "constant") {
      if (!spec.args.count("value")) return Status::badInput("needs argument 'value'");
      CLEAVE_ASSIGN_OR_RETURN(value, numberArg(spec.args, "value", 0.0));
    }
    fill(type, out, [value] { return value; });
    return Status::ok();
  }

  // 3. Random kinds need a float tensor.
  if (!isFloat(type.dtype))
    return Status::badInput("cannot fill a " + type.str() + " tensor (integer and bool parameters take zeros, ones, "
                            "constant or data)");
  if (kind == "normal") {
    CLEAVE_ASSIGN_OR_RETURN(double mean, numberArg(spec.args, "mean", 0.0));
    CLEAVE_ASSIGN_OR_RETURN(double std_dev, numberArg(spec.args, "std", 1.0));
    fillNormal(type, out, seed, mean, std_dev);
    return Status::ok();
  }
  if (kind == "uniform") {
    CLEAVE_ASSIGN_OR_RETURN(double low, numberArg(spec.args, "low", 0.0));
    CLEAVE_ASSIGN_OR_RETURN(double high, numberArg(spec.args, "high", 1.0));
    fillUniform(type, out, seed, low, high);
    return Status::ok();
  }

  // 4. Fan-based kinds: xavier uses both fans, kaiming the one `mode` names. As torch.nn.init, an
  //    empty tensor needs no fans.
  if (type.numel() == 0) return Status::ok();
  CLEAVE_ASSIGN_OR_RETURN(Fans fans, computeFans(type.shape, spec.args));
  double std_dev = 0;
  if (kind == "xavier_uniform" || kind == "xavier_normal") {
    CLEAVE_ASSIGN_OR_RETURN(double gain, numberArg(spec.args, "gain", 1.0));
    if (fans.fan_in <= 0 || fans.fan_out <= 0) return fanError("fan_in and fan_out", type);
    std_dev = gain * std::sqrt(2.0 / (fans.fan_in + fans.fan_out));
  } else {
    CLEAVE_ASSIGN_OR_RETURN(double a, numberArg(spec.args, "a", 0.0));
    CLEAVE_ASSIGN_OR_RETURN(std::string mode, stringArg(spec.args, "mode", "fan_in"));
    CLEAVE_ASSIGN_OR_RETURN(std::string nonlinearity, stringArg(spec.args, "nonlinearity", "leaky_relu"));
    if (mode != "fan_in" && mode != "fan_out")
      return Status::badInput("mode '" + mode + "' is not fan_in or fan_out");
    CLEAVE_ASSIGN_OR_RETURN(double gain, nonlinearityGain(nonlinearity, a));
    double fan = mode == "fan_in" ? fans.fan_in : fans.fan_out;
    if (fan <= 0) return fanError(mode, type);
    std_dev = gain / std::sqrt(fan);
  }
  bool is_uniform = kind == "xavier_uniform" || kind == "kaiming_uniform";
  if (is_uniform) {
    double bound = std::sqrt(3.0) * std_dev;
    fillUniform(type, out, seed, -bound, bound);
  } else {
    fillNormal(type, out, seed, 0.0, std_dev);
  }
  return Status::ok();
}

}  // namespace

Expected<Fans> computeFans(const Shape& shape, const AttrMap& args) {
  Fans fans;
  bool has_in = args.count("fan_in") > 0;
  bool has_out = args.count("fan_out") > 0;
  if (shape.size() >= 2) {
    double receptive_field = 1;
    for (size_t i = 2; i < shape.size(); ++i) receptive_field *= static_cast<double>(shape[i]);
    fans.fan_in = static_cast<double>(shape[1]) * receptive_field;
    fans.fan_out = static_cast<double>(shape[0]) * receptive_field;
  } else if (!has_in && !has_out) {
    return Status::badInput("fans cannot be computed for a tensor of rank " + std::to_string(shape.size()) +
                            " (torch.nn.init needs rank >= 2); give fan_in / fan_out");
  }
  if (has_in) {
    CLEAVE_ASSIGN_OR_RETURN(fans.fan_in, numberArg(args, "fan_in", 0.0));
  }
  if (has_out) {
    CLEAVE_ASSIGN_OR_RETURN(fans.fan_out, numberArg(args, "fan_out", 0.0));
  }
  return fans;
}

Expected<double> nonlinearityGain(const std::string& nonlinearity, double a) {
  if (nonlinearity == "linear" || nonlinearity == "identity" || nonlinearity == "sigmoid" ||
      nonlinearity == "conv1d" || nonlinearity == "conv2d" || nonlinearity == "conv3d")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + a * a));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  return Status::badInput("unknown nonlinearity '" + nonlinearity +
                          "' (linear, sigmoid, tanh, relu, leaky_relu, selu, conv2d)");
}

Status runInitializer(const InitializerSpec& spec, const TensorType& type, void* out) {
  if (!acceptedArgs().count(spec.kind)) return Status::badInput("unknown initializer '" + spec.kind + "'");
  return runChecked(spec, type, out).withContext(spec.kind + ": ");
}

}  // namespace cleave::runtime
