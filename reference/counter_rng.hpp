// Deterministic test data from a seed: a Philox stream, so that the same seed gives the same
// numbers on every machine and compiler (std:: distributions are implementation-defined).
#pragma once

#include <cstdint>

#include "common/philox.hpp"

namespace dflash {

class CounterRng {
 public:
  explicit CounterRng(std::uint64_t seed, std::uint32_t stream = 0)
      : key_(philox_key_from_seed(seed)), stream_(stream) {}

  std::uint32_t next_u32() {
    if (used_ == 4) {
      const Philox4x32 counter{
          {static_cast<std::uint32_t>(block_), static_cast<std::uint32_t>(block_ >> 32), stream_, 0xDA7Au}};
      words_ = philox4x32_10(counter, key_);
      ++block_;
      used_ = 0;
    }
    return words_.v[used_++];
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() {
    const std::uint64_t hi = next_u32() >> 5, lo = next_u32() >> 6;
    return (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) * (1.0 / 9007199254740992.0);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), n >= 1 (the modulo bias is irrelevant for test data).
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(((std::uint64_t(next_u32()) << 32) | next_u32()) % std::uint64_t(n));
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  Philox2x32Key key_;
  std::uint32_t stream_;
  std::uint64_t block_ = 0;
  Philox4x32 words_{};
  int used_ = 4;
};

}  // namespace dflash
