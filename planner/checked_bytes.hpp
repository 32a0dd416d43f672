// Byte counts are products of sizes a user types (tokens, vocabulary, hidden width): a typo can
// overflow 64 bits, and a wrapped count would print a plan that fits. Every product and sum in
// the planner goes through these, which refuse instead of wrapping; every size is checked first
// (require_at_least names the field or flag and the value).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "io/errors.hpp"

namespace dflash {

inline std::int64_t checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t p = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) {
      throw_input_error("plan sizes", "a byte count overflows 64 bits; check tokens, context and model sizes");
    }
  }
  return p;
}

inline std::int64_t checked_sum(std::int64_t a, std::int64_t b) {
  std::int64_t s = 0;
  if (__builtin_add_overflow(a, b, &s)) {
    throw_input_error("plan sizes", "a byte count overflows 64 bits; check tokens, context and model sizes");
  }
  return s;
}

inline void require_at_least(std::int64_t value, std::int64_t low, std::string_view field) {
  if (value < low) throw_input_error(field, str(value, " must be at least ", low));
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace dflash
