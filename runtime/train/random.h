// Random: a seeded, bit-exact random stream (xoshiro256**), the same on every machine.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace cleave::runtime {

// Mixes several 64-bit values into one well-spread seed (splitmix64 over each in turn).
uint64_t mixSeed(std::initializer_list<uint64_t> parts);

// A deterministic random stream. Unlike <random>'s distributions, every conversion to floats is
// written here, so a seed gives the same numbers with any compiler or standard library.
class Random {
 public:
  explicit Random(uint64_t seed);

  // The next 64 random bits.
  uint64_t nextBits();
  // A double uniform in [0, 1), with 53 random bits.
  double uniform();
  // An integer uniform in [0, bound), without modulo bias; bound must be > 0.
  uint64_t below(uint64_t bound);
  // A standard normal sample (Box–Muller; samples are produced in pairs and the second is kept).
  double normal();

 private:
  uint64_t state_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

}  // namespace cleave::runtime
