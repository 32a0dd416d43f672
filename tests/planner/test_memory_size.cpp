// Device memory strings: decimal and binary units, plain bytes, and the errors that name the flag.
#include <gtest/gtest.h>

#include "planner/memory_size.hpp"
#include "tests/planner/expect_input_error.hpp"

namespace dflash {
namespace {

TEST(MemorySize, DecimalUnitsArePowersOfTen) {
  EXPECT_EQ(parse_memory_size("95GB", "--gpu-memory"), 95'000'000'000);
  EXPECT_EQ(parse_memory_size("95 GB", "--gpu-memory"), 95'000'000'000);
  EXPECT_EQ(parse_memory_size("3kb", "--gpu-memory"), 3'000);
  EXPECT_EQ(parse_memory_size("2MB", "--gpu-memory"), 2'000'000);
  EXPECT_EQ(parse_memory_size("1TB", "--gpu-memory"), 1'000'000'000'000);
}

TEST(MemorySize, BinaryUnitsArePowersOfTwo) {
  EXPECT_EQ(parse_memory_size("80GiB", "--gpu-memory"), 80LL << 30);
  EXPECT_EQ(parse_memory_size("1KiB", "--gpu-memory"), 1024);
  EXPECT_EQ(parse_memory_size("5MiB", "--gpu-memory"), 5LL << 20);
  EXPECT_EQ(parse_memory_size("2TiB", "--gpu-memory"), 2LL << 40);
}

TEST(MemorySize, PlainBytesAndWholeFractions) {
  EXPECT_EQ(parse_memory_size("1073741824", "--gpu-memory"), 1LL << 30);
  EXPECT_EQ(parse_memory_size("17B", "--gpu-memory"), 17);
  EXPECT_EQ(parse_memory_size("1.5KiB", "--gpu-memory"), 1536);
  EXPECT_EQ(parse_memory_size("94.5GB", "--gpu-memory"), 94'500'000'000);
}

void expect_error(const char* text, const char* fragment) {
  expect_input_error([&] { parse_memory_size(text, "--gpu-memory"); }, {"--gpu-memory", text, fragment});
}

TEST(MemorySize, UnknownUnitIsNotASize) { expect_error("95XB", "is not a size"); }
TEST(MemorySize, EmptyIsNotASize) { expect_error("", "is not a size"); }
TEST(MemorySize, UnitWithoutNumberIsNotASize) { expect_error("GB", "is not a size"); }
TEST(MemorySize, DanglingPointIsNotASize) { expect_error("95.GB", "is not a size"); }
TEST(MemorySize, TrailingGarbageIsNotASize) { expect_error("95GBx", "is not a size"); }
TEST(MemorySize, NegativeIsRejected) { expect_error("-95GB", "negative"); }
TEST(MemorySize, ZeroIsRejected) { expect_error("0GB", "zero"); }
TEST(MemorySize, FractionOfAByteIsRejected) { expect_error("0.3B", "whole number of bytes"); }
TEST(MemorySize, OverflowIsRejected) { expect_error("9000000000TiB", "larger than"); }
TEST(MemorySize, HugeByteCountIsRejected) { expect_error("99999999999999999999", "larger than"); }

TEST(MemorySize, GibFormatting) {
  EXPECT_EQ(gib_string(5LL << 30), "5.00");
  EXPECT_EQ(gib_string(7'784'628'224), "7.25");
}

}  // namespace
}  // namespace dflash
