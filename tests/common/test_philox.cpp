// Philox4x32-10 against the Random123 known-answer vectors quoted in SPEC §6.
#include <gtest/gtest.h>

#include "common/philox.hpp"

namespace dflash {
namespace {

void expect_words(const Philox4x32& got, std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
  EXPECT_EQ(got.v[0], a);
  EXPECT_EQ(got.v[1], b);
  EXPECT_EQ(got.v[2], c);
  EXPECT_EQ(got.v[3], d);
}

TEST(Philox, KnownAnswerZeroCounterZeroKey) {
  expect_words(philox4x32_10({{0, 0, 0, 0}}, {{0, 0}}), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnes) {
  const std::uint32_t ones = 0xffffffffu;
  expect_words(philox4x32_10({{ones, ones, ones, ones}}, {{ones, ones}}), 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u,
               0x6d5451fdu);
}

TEST(Philox, KnownAnswerPiDigits) {
  expect_words(philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, {{0xa4093822u, 0x299f31d0u}}),
               0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, SeedSplitsIntoLowAndHighKeyWords) {
  const Philox2x32Key k = philox_key_from_seed(0x0123456789abcdefULL);
  EXPECT_EQ(k.v[0], 0x89abcdefu);
  EXPECT_EQ(k.v[1], 0x01234567u);
}

}  // namespace
}  // namespace dflash
