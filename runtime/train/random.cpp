// Random: a seeded, bit-exact random stream (xoshiro256**), the same on every machine.
#include "runtime/train/random.h"

#include <cmath>
#include <numbers>

namespace cleave::runtime {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t mixSeed(std::initializer_list<uint64_t> parts) {
  uint64_t state = 0x6a09e667f3bcc909ull;
  uint64_t mixed = 0;
  for (uint64_t part : parts) {
    state ^= part;
    mixed = splitmix64(state);
  }
  return mixed;
}

Random::Random(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& word : state_) word = splitmix64(state);
}

uint64_t Random::nextBits() {
  uint64_t result = rotateLeft(state_[1] * 5, 7) * 9;
  uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotateLeft(state_[3], 45);
  return result;
}

double Random::uniform() { return static_cast<double>(nextBits() >> 11) * 0x1.0p-53; }

uint64_t Random::below(uint64_t bound) {
  // Rejection sampling on the top bits: draw from the smallest power-of-two range covering bound.
  uint64_t mask = bound - 1;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  for (;;) {
    uint64_t candidate = nextBits() & mask;
    if (candidate < bound) return candidate;
  }
}

double Random::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  // Box–Muller: u1 in (0, 1] keeps the logarithm finite.
  double u1 = 1.0 - uniform();
  double u2 = uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_normal_ = true;
  return radius * std::cos(angle);
}

}  // namespace cleave::runtime
