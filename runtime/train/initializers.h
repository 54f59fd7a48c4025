// Parameter initializers: deterministic seeded fills following torch.nn.init's formulas.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ir/attribute.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave::runtime {

// How to fill one parameter: the kind, its arguments, and stored bytes for kind "data".
// Kinds and arguments (every kind also takes `seed`, an int, default 0):
//   zeros, ones, constant(value), normal(mean=0, std=1), uniform(low=0, high=1),
//   xavier_uniform(gain=1), xavier_normal(gain=1),
//   kaiming_uniform(a=0, mode="fan_in", nonlinearity="leaky_relu"), kaiming_normal(same),
//   data (the tensor's bytes, little-endian, row-major).
// The xavier and kaiming kinds also take `fan_in` / `fan_out` to override the fans of the shape.
struct InitializerSpec {
  std::string kind;
  AttrMap args;
  std::span<const uint8_t> data;
};

// The fans torch.nn.init computes for a weight stored [out, in, ...]: fan_in = shape[1]·prod(shape[2:]),
// fan_out = shape[0]·prod(shape[2:]).
struct Fans {
  double fan_in = 0;
  double fan_out = 0;
};

// The fans of `shape`, with explicit `fan_in` / `fan_out` args taking precedence; an error when the
// shape has rank < 2 and no override is given.
Expected<Fans> computeFans(const Shape& shape, const AttrMap& args);

// torch.nn.init.calculate_gain(nonlinearity, a).
Expected<double> nonlinearityGain(const std::string& nonlinearity, double a);

// Fills `out`, a tensor of `type`, as `spec` says. Integer and bool tensors take only zeros, ones,
// constant and data. Errors (kBadInput) start with the initializer kind.
Status runInitializer(const InitializerSpec& spec, const TensorType& type, void* out);

}  // namespace cleave::runtime
