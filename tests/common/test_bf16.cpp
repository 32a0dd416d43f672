// bf16 rounding: nearest, ties to even, NaN preserved, overflow to infinity.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "common/bf16.hpp"

namespace dflash {
namespace {

float from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(Bf16, RepresentableValuesAreExact) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f, -1.0e-3f * 1.024f}) {
    const float r = round_to_bf16(v);
    EXPECT_EQ(round_to_bf16(r), r) << v;  // idempotent
  }
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f}) EXPECT_EQ(round_to_bf16(v), v);
  EXPECT_EQ(bf16_bits_from_float(1.0f), 0x3F80u);
  EXPECT_EQ(bf16_bits_from_float(-2.0f), 0xC000u);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  // 1 + 2^-8 lies exactly between 1 (even mantissa) and 1 + 2^-7: ties go to 1.
  EXPECT_EQ(bf16_bits_from_float(from_bits(0x3F808000u)), 0x3F80u);
  // 1 + 3*2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): ties go up.
  EXPECT_EQ(bf16_bits_from_float(from_bits(0x3F818000u)), 0x3F82u);
  // Just above the tie rounds up, just below rounds down.
  EXPECT_EQ(bf16_bits_from_float(from_bits(0x3F808001u)), 0x3F81u);
  EXPECT_EQ(bf16_bits_from_float(from_bits(0x3F807FFFu)), 0x3F80u);
}

TEST(Bf16, RoundingErrorIsAtMostHalfAnUlp) {
  for (float v = -10.0f; v < 10.0f; v += 0.0137f) {
    const float r = round_to_bf16(v);
    const float ulp = std::ldexp(1.0f, std::ilogb(v == 0 ? 1.0f : v) - 7);
    EXPECT_LE(std::abs(r - v), 0.5f * ulp) << v;
  }
}

TEST(Bf16, SpecialValues) {
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7F800001u))));  // signalling NaN whose payload would round away
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
}

}  // namespace
}  // namespace dflash
