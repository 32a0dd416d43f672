// bf16 rounding: nearest, ties to even, NaN preserved, overflow to infinity.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "common/storage.hpp"

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

// What the kernels store (common/storage.hpp): narrow_into a bf16 element rounds to nearest even,
// and widen gives the stored value back exactly. SPEC §10's bf16 rule cannot tell truncation from
// rounding (truncation's error is within twice rounding's), yet truncation pulls every stored value
// toward zero, step after step: so the known answers are held here, on both signs.
TEST(Bf16, StorageNarrowsToNearestEvenAndWidensExactly) {
  struct Case {
    std::uint32_t value;
    std::uint16_t stored;
  };
  for (const Case c : {Case{0x3F80C000u, 0x3F81u},     // 1 + 1.5 2^-8: above the half, up (truncation: 0x3F80)
                       Case{0xBF80C000u, 0xBF81u},     // its negative: away from zero too
                       Case{0x3F808000u, 0x3F80u},     // a tie to the even 1
                       Case{0x3F818000u, 0x3F82u},     // a tie up to the even 1 + 2^-6
                       Case{0x3F80FFFFu, 0x3F81u}}) {  // just below 1 + 2^-7: up
    std::uint16_t stored = 0;
    narrow_into(from_bits(c.value), stored);
    EXPECT_EQ(stored, c.stored) << std::hex << c.value;
    EXPECT_EQ(widen(stored), from_bits(std::uint32_t(c.stored) << 16)) << std::hex << c.value;
  }
  float kept = 0.0f;
  narrow_into(from_bits(0x3F80C000u), kept);  // fp32 storage keeps the value as it is
  EXPECT_EQ(kept, from_bits(0x3F80C000u));
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
