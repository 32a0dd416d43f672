// Writer -> reader round trips for every dtype, the rounding of doubles to narrower floats,
// integer range checks, and the writer's determinism, padding, alignment and metadata.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::safetensors {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::input_error_message;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Bitwise equality, so that -0.0 and NaN are compared exactly.
void expect_same_bits(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(actual[i]), std::bit_cast<std::uint64_t>(expected[i]))
          << "element " << i << ": " << actual[i] << " vs " << expected[i];
    }
  }
}

Reader round_trip(const Writer& writer) { return Reader::from_bytes(writer.to_bytes(), "round-trip"); }

// Values stored as `dtype` and read back.
std::vector<double> stored_as(Dtype dtype, const std::vector<double>& values) {
  Writer writer;
  writer.add_floats("x", dtype, {static_cast<std::int64_t>(values.size())}, values);
  return round_trip(writer).doubles("x");
}

TEST(SafetensorsRoundTrip, F64IsExact) {
  const std::vector<double> values = {
      0.0, -0.0, 3.141592653589793, -1e308, 5e-324, kInf, -kInf, std::numeric_limits<double>::quiet_NaN(), 0.1};
  expect_same_bits(stored_as(Dtype::F64, values), values);
}

TEST(SafetensorsRoundTrip, F32ExactValuesAndRounding) {
  const std::vector<double> exact = {0.0, -0.0, 1.5, -0x1.fffffep127, 0x1p-149, kInf, -kInf};
  expect_same_bits(stored_as(Dtype::F32, exact), exact);
  // Not representable: rounded to nearest (C++ double -> float is round to nearest even).
  expect_same_bits(stored_as(Dtype::F32, {0.1, 1.0 + 0x1p-24, 1.0 + 0x1p-24 + 0x1p-40, 1e39}),
                   {static_cast<double>(0.1f), 1.0, 1.0 + 0x1p-23, kInf});
}

TEST(SafetensorsRoundTrip, BF16ExactValuesAndRoundingToNearestEven) {
  const std::vector<double> exact = {0.0, -0.0, 1.0, -2.5, 0x1.fep127, 0x1p-133, kInf, -kInf};
  expect_same_bits(stored_as(Dtype::BF16, exact), exact);
  expect_same_bits(stored_as(Dtype::BF16,
                             {
                                 1.0 + 0x1p-8,            // tie: down to the even 1.0
                                 1.0 + 3 * 0x1p-8,        // tie: up to the even 1 + 2^-6
                                 1.0 + 0x1p-8 + 0x1p-30,  // just above the tie: up
                                 -(1.0 + 0x1p-8 + 0x1p-30),
                                 0x1.ffp127,  // halfway to 2^128 with an odd last bit: inf
                                 1e39,        // beyond float: inf
                             }),
                   {1.0, 1.0 + 0x1p-6, 1.0 + 0x1p-7, -(1.0 + 0x1p-7), kInf, kInf});
}

TEST(SafetensorsRoundTrip, BF16FromDoubleAvoidsDoubleRounding) {
  // double -> float -> bf16 would lose the 2^-30 in the first step, then see an exact tie and
  // round down. The correct single rounding goes up.
  const double value = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(float_from_bf16_bits(bf16_bits_from_float(static_cast<float>(value))), 1.0f);  // the trap
  EXPECT_EQ(float_from_bf16_bits(bf16_bits_from_double(value)), 1.0f + 0x1p-7f);
}

// Every finite positive value of a 16-bit format (bit patterns below `infinity_bits`) survives a
// round trip with either sign; every midpoint between neighbours goes to the one with an even
// last bit, and a hair above (below) it goes up (down).
template <class Decode, class Encode>
void expect_every_value_and_midpoint_rounds_correctly(std::uint16_t infinity_bits, Decode decode, Encode encode) {
  for (std::uint32_t bits = 0; bits < infinity_bits; ++bits) {
    const auto low = static_cast<std::uint16_t>(bits);
    const auto high = static_cast<std::uint16_t>(bits + 1);
    const double value = decode(low);
    ASSERT_EQ(encode(value), low);
    ASSERT_EQ(encode(-value), static_cast<std::uint16_t>(low | 0x8000u));
    const double next = decode(high);
    if (std::isinf(next)) continue;
    const double midpoint = value + (next - value) / 2;  // exact in double
    const std::uint16_t even = (low & 1u) == 0 ? low : high;
    ASSERT_EQ(encode(midpoint), even) << std::hex << bits;
    ASSERT_EQ(encode(std::nextafter(midpoint, kInf)), high) << std::hex << bits;
    ASSERT_EQ(encode(std::nextafter(midpoint, 0.0)), low) << std::hex << bits;
  }
}

// float_rounded_to_odd by its definition: the float nearest toward zero (nextafter toward 0 where
// the conversion rounded away), its last bit set when the value was not exact. Over every exponent a
// float can round from (from below the smallest subnormal to past the largest float), both signs,
// values a hair either side of floats and random ones; the encoder's bit arithmetic must agree.
TEST(SafetensorsRoundTrip, FloatRoundedToOddIsTruncationWithAStickyBit) {
  const auto by_definition = [](double v) {
    float toward_zero = static_cast<float>(v);
    if (static_cast<double>(toward_zero) == v) return toward_zero;
    if (std::fabs(static_cast<double>(toward_zero)) > std::fabs(v)) toward_zero = std::nextafter(toward_zero, 0.0f);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(toward_zero) | 1u);
  };
  std::vector<double> values = {0x1p-160, 0x1p-149 / 3,           0x1p-150,       0x1.8p-149,   3.4028235677973366e38,
                                0x1p128,  0x1.fffffffffffffp1023, 0x1.ffffffp127, 1.0 + 0x1p-30};
  std::uint64_t state = 0x9E3779B97F4A7C15u;
  for (int e = -160; e <= 130; ++e) {
    for (int k = 0; k < 16; ++k) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      values.push_back(std::ldexp(1.0 + double(state >> 11) * 0x1p-53, e));
    }
    const float f = std::ldexp(1.0f, std::max(e, -149));
    if (std::isfinite(f)) {
      values.push_back(std::nextafter(static_cast<double>(f), kInf));
      values.push_back(std::nextafter(static_cast<double>(f), 0.0));
    }
  }
  for (const double v : values) {
    for (const double signed_v : {v, -v}) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(float_rounded_to_odd(signed_v)),
                std::bit_cast<std::uint32_t>(by_definition(signed_v)))
          << std::hexfloat << signed_v;
    }
  }
}

TEST(SafetensorsRoundTrip, BF16AllValuesAndMidpointsRoundCorrectly) {
  expect_every_value_and_midpoint_rounds_correctly(
      0x7F80u, [](std::uint16_t bits) { return static_cast<double>(float_from_bf16_bits(bits)); },
      bf16_bits_from_double);
}

TEST(SafetensorsRoundTrip, F16ExactValuesAndRoundingToNearestEven) {
  const std::vector<double> exact = {0.0, -0.0, 1.0, -2.5, 65504.0, 0x1p-14, 0x1p-24, 1023 * 0x1p-24, kInf, -kInf};
  expect_same_bits(stored_as(Dtype::F16, exact), exact);
  expect_same_bits(stored_as(Dtype::F16,
                             {
                                 1.0 + 0x1p-11,            // tie: down to 1.0
                                 1.0 + 3 * 0x1p-11,        // tie: up to 1 + 2^-9
                                 1.0 + 0x1p-11 + 0x1p-40,  // above the tie: up
                                 65519.0,                  // below the overflow midpoint: max half
                                 65520.0,                  // the midpoint, odd max: inf
                                 -1e6,                     // overflow: -inf
                                 0x1p-25,                  // half the smallest subnormal: tie to 0
                                 3 * 0x1p-25,              // tie between 1 and 2 units: 2 units
                                 0x1p-25 + 0x1p-40,        // above: the smallest subnormal
                                 0x1p-14 - 0x1p-26,        // rounds up into the smallest normal
                             }),
                   {1.0, 1.0 + 0x1p-9, 1.0 + 0x1p-10, 65504.0, kInf, -kInf, 0.0, 0x1p-23, 0x1p-24, 0x1p-14});
}

TEST(SafetensorsRoundTrip, F16AllValuesAndMidpointsRoundCorrectly) {
  expect_every_value_and_midpoint_rounds_correctly(0x7C00u, double_from_f16_bits, f16_bits_from_double);
}

TEST(SafetensorsRoundTrip, NanStaysNanInEveryFloatDtype) {
  for (Dtype dtype : {Dtype::F64, Dtype::F32, Dtype::BF16, Dtype::F16}) {
    const auto back = stored_as(dtype, {std::numeric_limits<double>::quiet_NaN()});
    EXPECT_TRUE(std::isnan(back[0])) << dtype_name(dtype);
  }
}

// The bulk reader of the feature shards and weights (load_float_elements) against the element
// reader, bit for bit (NaN payloads included): every 16-bit pattern for BF16 and F16, and for F32
// and F64 a sweep of patterns with every exponent, both signs and several mantissas, from an
// unaligned start so that no alignment is assumed.
TEST(SafetensorsRoundTrip, BulkFloatLoadIsTheElementLoadBitForBit) {
  for (Dtype dtype : {Dtype::BF16, Dtype::F16, Dtype::F32, Dtype::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const std::size_t size = dtype_size(dtype);
    std::vector<std::uint64_t> patterns;
    if (size == 2) {
      for (std::uint64_t b = 0; b < 0x10000u; ++b) patterns.push_back(b);
    } else {
      const int exponent_bits = size == 4 ? 8 : 11, mantissa_bits = size == 4 ? 23 : 52;
      for (std::uint64_t sign = 0; sign < 2; ++sign) {
        for (std::uint64_t e = 0; e < (1u << exponent_bits); ++e) {
          for (std::uint64_t m : {0ull, 1ull, 0x5A5A5ull, (1ull << mantissa_bits) - 1}) {
            patterns.push_back(sign << (exponent_bits + mantissa_bits) | e << mantissa_bits | m);
          }
        }
      }
    }
    std::vector<std::byte> bytes(1 + patterns.size() * size);
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      for (std::size_t k = 0; k < size; ++k) bytes[1 + i * size + k] = std::byte((patterns[i] >> (8 * k)) & 0xFF);
    }
    std::vector<double> bulk(patterns.size() + 1, 7.0);
    load_float_elements(dtype, bytes.data() + 1, patterns.size(), bulk.data());
    EXPECT_EQ(bulk.back(), 7.0) << "wrote past count";
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      const double one = load_float_element(dtype, bytes.data() + 1 + i * size);
      ASSERT_EQ(std::bit_cast<std::uint64_t>(bulk[i]), std::bit_cast<std::uint64_t>(one)) << "pattern " << patterns[i];
    }
  }
  double untouched = 3.0;
  load_float_elements(Dtype::BF16, nullptr, 0, &untouched);
  EXPECT_EQ(untouched, 3.0);
  EXPECT_THROW(load_float_elements(Dtype::I32, nullptr, 0, &untouched), std::logic_error);
}

// The bulk writer of checkpoints and exports (store_float_elements) against the element writer,
// bit for bit, into every float dtype, from doubles and from floats: every exponent of the source
// type, both signs, mantissas that are exact, halfway between two bf16, f16 or f32 neighbours (ties)
// and just off them, NaN and infinity patterns among them; to an unaligned start, nothing written
// past count. The one documented difference: a signaling NaN float stored as F32 keeps its bits.
TEST(SafetensorsRoundTrip, BulkFloatStoreIsTheElementStoreBitForBit) {
  std::vector<double> doubles;
  for (std::uint64_t sign = 0; sign < 2; ++sign) {
    for (std::uint64_t e = 0; e < 2048; ++e) {
      for (std::uint64_t m : {0ull, 1ull, 1ull << 28, (1ull << 28) + 1, 1ull << 41, (1ull << 41) | 1, 1ull << 44,
                              0x5A5A5A5A5A5Aull, (1ull << 52) - 1}) {
        doubles.push_back(std::bit_cast<double>(sign << 63 | e << 52 | m));
      }
    }
  }
  std::vector<float> floats;
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t m : {0u, 1u, 1u << 12, (1u << 12) + 1, 1u << 15, (1u << 15) | 1, 0x5A5A5u, (1u << 23) - 1}) {
        floats.push_back(std::bit_cast<float>(sign << 31 | e << 23 | m));
      }
    }
  }
  const auto check = [](Dtype dtype, const auto& values) {
    const std::size_t size = dtype_size(dtype);
    std::vector<std::byte> bulk(1 + values.size() * size + 1, std::byte{0x77}), one(size);
    store_float_elements(dtype, values.data(), values.size(), bulk.data() + 1);
    ASSERT_EQ(bulk.back(), std::byte{0x77}) << "wrote past count";
    for (std::size_t i = 0; i < values.size(); ++i) {
      store_float_element(dtype, static_cast<double>(values[i]), one.data());
      if constexpr (std::is_same_v<typename std::decay_t<decltype(values)>::value_type, float>) {
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(values[i]);
        if (dtype == Dtype::F32 && std::isnan(values[i]) && (bits & 0x00400000u) == 0) {
          std::uint32_t stored = 0;
          for (std::size_t k = 0; k < 4; ++k) stored |= std::uint32_t(bulk[1 + i * 4 + k]) << (8 * k);
          ASSERT_EQ(stored, bits) << "a signaling NaN keeps its bits";
          continue;
        }
      }
      ASSERT_TRUE(std::equal(one.begin(), one.end(), bulk.begin() + 1 + std::ptrdiff_t(i * size)))
          << "value " << i << " = " << values[i];
    }
  };
  for (Dtype dtype : {Dtype::BF16, Dtype::F16, Dtype::F32, Dtype::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    check(dtype, doubles);
    check(dtype, floats);
  }
  EXPECT_THROW(store_float_elements(Dtype::I32, doubles.data(), 1, nullptr), std::logic_error);
}

TEST(SafetensorsRoundTrip, Integers) {
  const std::vector<std::int64_t> i64 = {0, -1, std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::max(), 248070};
  const std::vector<std::int64_t> i32 = {0, -1, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int64_t> u8 = {0, 1, 128, 255};
  const std::vector<std::int64_t> flags = {1, 0, 0, 1, 1};
  Writer writer;
  writer.add_integers("i64", Dtype::I64, {5}, i64);
  writer.add_integers("i32", Dtype::I32, {2, 2}, i32);
  writer.add_integers("u8", Dtype::U8, {4}, u8);
  writer.add_integers("bool", Dtype::BOOL, {5}, flags);
  const Reader reader = round_trip(writer);
  EXPECT_THAT(reader.int64s("i64"), ElementsAreArray(i64));
  EXPECT_THAT(reader.int64s("i32"), ElementsAreArray(i32));
  EXPECT_THAT(reader.int64s("u8"), ElementsAreArray(u8));
  EXPECT_THAT(reader.int64s("bool"), ElementsAreArray(flags));
  EXPECT_EQ(reader.info("i32").shape, (Shape{2, 2}));
  EXPECT_EQ(reader.info("bool").dtype, Dtype::BOOL);
  // Integers convert to double exactly.
  EXPECT_THAT(reader.doubles("i32"), ElementsAreArray(std::vector<double>{0, -1, -2147483648.0, 2147483647.0}));
  EXPECT_THAT(reader.doubles("bool"), ElementsAreArray(std::vector<double>{1, 0, 0, 1, 1}));
}

TEST(SafetensorsRoundTrip, IntegerRangeChecks) {
  Writer writer;
  const std::vector<std::int64_t> too_big_i32 = {2147483648};
  const std::vector<std::int64_t> too_small_i32 = {-2147483649};
  const std::vector<std::int64_t> negative_u8 = {-1};
  const std::vector<std::int64_t> big_u8 = {256};
  const std::vector<std::int64_t> two_bool = {0, 2};
  EXPECT_THAT(input_error_message([&] { writer.add_integers("a", Dtype::I32, {1}, too_big_i32); }),
              HasSubstr("tensor 'a' element 0 = 2147483648 does not fit dtype I32"));
  EXPECT_THAT(input_error_message([&] { writer.add_integers("a", Dtype::I32, {1}, too_small_i32); }),
              HasSubstr("does not fit dtype I32"));
  EXPECT_THAT(input_error_message([&] { writer.add_integers("a", Dtype::U8, {1}, negative_u8); }),
              HasSubstr("element 0 = -1 does not fit dtype U8"));
  EXPECT_THAT(input_error_message([&] { writer.add_integers("a", Dtype::U8, {1}, big_u8); }),
              HasSubstr("does not fit dtype U8"));
  EXPECT_THAT(input_error_message([&] { writer.add_integers("a", Dtype::BOOL, {2}, two_bool); }),
              HasSubstr("element 1 = 2 does not fit dtype BOOL"));
  // A refused tensor is not half-added.
  EXPECT_NO_THROW(writer.add_integers("a", Dtype::U8, {1}, std::vector<std::int64_t>{7}));
}

TEST(SafetensorsRoundTrip, ConversionsRefuseWhatTheyCannotRepresent) {
  Writer writer;
  writer.add_integers("big", Dtype::I64, {2},
                      std::vector<std::int64_t>{(std::int64_t{1} << 53), (std::int64_t{1} << 53) + 1});
  writer.add_floats("f", Dtype::F32, {1}, std::vector<double>{1.0});
  writer.add_bytes("flags", Dtype::BOOL, {2}, testing::bytes_of({1, 2}));
  const Reader reader = round_trip(writer);
  EXPECT_THAT(input_error_message([&] { reader.doubles("big"); }),
              HasSubstr("tensor 'big' element 1 = 9007199254740993 is not exactly representable as a double"));
  EXPECT_THAT(input_error_message([&] { reader.int64s("f"); }),
              HasSubstr("tensor 'f' has float dtype F32, not an integer dtype"));
  EXPECT_THAT(input_error_message([&] { reader.int64s("flags"); }), HasSubstr("BOOL element 1 is byte 2, not 0 or 1"));
  EXPECT_THAT(input_error_message([&] { reader.doubles("flags"); }), HasSubstr("BOOL element 1 is byte 2"));
  EXPECT_THAT(input_error_message([&] { reader.tensor("nope"); }), HasSubstr("round-trip: no tensor named 'nope'"));
}

TEST(SafetensorsRoundTrip, ScalarsAndEmptyTensors) {
  Writer writer;
  writer.add_floats("output/loss", Dtype::F64, {}, std::vector<double>{2.5});
  writer.add_floats("empty", Dtype::F32, {0}, std::vector<double>{});
  writer.add_integers("empty2", Dtype::I64, {3, 0}, std::vector<std::int64_t>{});
  const Reader reader = round_trip(writer);
  EXPECT_EQ(reader.info("output/loss").shape, Shape{});
  EXPECT_THAT(reader.doubles("output/loss"), ElementsAreArray(std::vector<double>{2.5}));
  EXPECT_TRUE(reader.doubles("empty").empty());
  EXPECT_EQ(reader.info("empty2").shape, (Shape{3, 0}));
  EXPECT_TRUE(reader.int64s("empty2").empty());
}

TEST(SafetensorsRoundTrip, RawBytes) {
  Writer writer;
  writer.add_bytes("h", Dtype::F16, {2}, testing::bytes_of({0x00, 0x3C, 0x00, 0xC0}));  // 1.0, -2.0
  const Reader reader = round_trip(writer);
  EXPECT_THAT(reader.doubles("h"), ElementsAreArray(std::vector<double>{1.0, -2.0}));
  EXPECT_THAT(reader.tensor("h").bytes, ElementsAreArray(testing::bytes_of({0x00, 0x3C, 0x00, 0xC0})));
  EXPECT_THAT(input_error_message([&] {
                writer.add_bytes("odd", Dtype::F32, {1}, testing::bytes_of({1, 2, 3}));
              }),
              HasSubstr("tensor 'odd' has 3 bytes, not a whole number of 4-byte F32 elements"));
}

TEST(SafetensorsRoundTrip, WriterRejectsBadTensors) {
  Writer writer;
  const std::vector<double> three = {1, 2, 3};
  writer.add_floats("a", Dtype::F64, {3}, three);
  EXPECT_THAT(input_error_message([&] { writer.add_floats("a", Dtype::F64, {3}, three); }),
              HasSubstr("tensor 'a' added twice"));
  EXPECT_THAT(input_error_message([&] { writer.add_floats("__metadata__", Dtype::F64, {3}, three); }),
              HasSubstr("tensor name '__metadata__' is reserved"));
  EXPECT_THAT(input_error_message([&] {
                writer.add_floats("b", Dtype::F64, {2, 2}, three);
              }),
              HasSubstr("tensor 'b' has 3 values but shape [2, 2] needs 4"));
  EXPECT_THAT(input_error_message([&] { writer.add_floats("b", Dtype::F64, {-3}, three); }),
              HasSubstr("shape [-3] has a negative dimension"));
  EXPECT_THAT(input_error_message([&] { writer.add_floats("b", Dtype::I64, {3}, three); }),
              HasSubstr("dtype I64 is not a float dtype"));
  EXPECT_THAT(input_error_message([&] { writer.add_integers("b", Dtype::F32, {1}, std::vector<std::int64_t>{1}); }),
              HasSubstr("dtype F32 is not an integer dtype"));
  EXPECT_THAT(input_error_message([&] { writer.add_floats("b\xff", Dtype::F64, {3}, three); }),
              HasSubstr("is not valid UTF-8"));
  EXPECT_THAT(input_error_message([&] { writer.set_metadata("k", "\xc3"); }), HasSubstr("is not valid UTF-8"));
}

TEST(SafetensorsRoundTrip, MetadataRoundTrip) {
  Writer writer;
  const std::string config =
      "{\n  \"hidden_size\": 64,\n  \"layer_types\": [\"sliding_attention\", \"full_attention\"],"
      "\n  \"note\": \"tab\\there, quote \\\" and \xc3\xa9\"\n}";
  writer.set_metadata("format", "dflash-golden");
  writer.set_metadata("config", config);
  writer.set_metadata("seed", "20261129");
  writer.set_metadata("empty", "");
  writer.set_metadata("seed", "7");  // replaced
  writer.add_floats("x", Dtype::F64, {1}, std::vector<double>{1});
  const Reader reader = round_trip(writer);
  EXPECT_EQ(reader.metadata(),
            (Metadata{{"format", "dflash-golden"}, {"config", config}, {"seed", "7"}, {"empty", ""}}));
}

TEST(SafetensorsRoundTrip, NoTensorsAtAll) {
  Writer writer;
  writer.set_metadata("format", "pt");
  const Reader reader = round_trip(writer);
  EXPECT_TRUE(reader.names().empty());
  EXPECT_EQ(reader.metadata().at("format"), "pt");
}

// A writer with a mix of dtypes and odd element counts, filled in the order given.
Writer mixed_writer(bool reversed) {
  std::vector<std::function<void(Writer&)>> adds = {
      [](Writer& w) {
        w.add_floats("b.bf16", Dtype::BF16, {3}, std::vector<double>{1, 2, 3});
      },
      [](Writer& w) {
        w.add_integers("a.u8", Dtype::U8, {5}, std::vector<std::int64_t>{1, 2, 3, 4, 5});
      },
      [](Writer& w) {
        w.add_floats("z.f64", Dtype::F64, {2}, std::vector<double>{0.5, -0.25});
      },
      [](Writer& w) { w.add_floats("c.f32", Dtype::F32, {1}, std::vector<double>{7}); },
      [](Writer& w) { w.add_integers("d.i64", Dtype::I64, {1}, std::vector<std::int64_t>{-9}); },
      [](Writer& w) { w.add_floats("e.f16", Dtype::F16, {1}, std::vector<double>{0.5}); },
      [](Writer& w) { w.set_metadata("k2", "v2"); },
      [](Writer& w) { w.set_metadata("k1", "v1"); },
  };
  if (reversed) std::reverse(adds.begin(), adds.end());
  Writer writer;
  for (const auto& add : adds) add(writer);
  return writer;
}

TEST(SafetensorsWriter, SameContentGivesIdenticalBytesWhateverTheOrder) {
  const std::vector<std::byte> forward = mixed_writer(false).to_bytes();
  EXPECT_EQ(forward, mixed_writer(true).to_bytes());
  EXPECT_EQ(forward, mixed_writer(false).to_bytes());
}

TEST(SafetensorsWriter, HeaderIsPaddedWithSpacesToAMultipleOf8) {
  for (std::size_t name_length = 1; name_length <= 16; ++name_length) {
    Writer writer;
    writer.add_floats(std::string(name_length, 'n'), Dtype::F32, {1}, std::vector<double>{1});
    const std::vector<std::byte> bytes = writer.to_bytes();
    const Reader reader = Reader::from_bytes(bytes);
    const std::uint64_t header_length = reader.layout().header_length;
    EXPECT_EQ(header_length % 8, 0u) << name_length;
    EXPECT_EQ(reader.layout().data_start % 8, 0u);
    // The JSON ends at the last '}'; everything after it is padding, and padding is spaces.
    const std::string header(reinterpret_cast<const char*>(bytes.data()) + 8, header_length);
    const std::size_t json_end = header.rfind('}') + 1;
    EXPECT_LT(header.size() - json_end, 8u);
    EXPECT_EQ(header.substr(json_end), std::string(header.size() - json_end, ' '));
  }
}

TEST(SafetensorsWriter, EveryTensorIsAlignedToItsElementSize) {
  const Reader reader = round_trip(mixed_writer(false));
  for (const std::string& name : reader.names()) {
    const TensorInfo& info = reader.info(name);
    EXPECT_EQ((reader.layout().data_start + info.begin) % dtype_size(info.dtype), 0u) << name;
  }
  // Largest elements first, then by name.
  EXPECT_EQ(reader.info("d.i64").begin, 0u);
  EXPECT_EQ(reader.info("z.f64").begin, 8u);
  EXPECT_EQ(reader.info("c.f32").begin, 24u);
  EXPECT_EQ(reader.info("b.bf16").begin, 28u);
  EXPECT_EQ(reader.info("e.f16").begin, 34u);
  EXPECT_EQ(reader.info("a.u8").begin, 36u);
  EXPECT_EQ(reader.layout().data_size, 41u);
}

TEST(SafetensorsWriter, EveryDtypeReadsBackFromOneFile) {
  const Reader reader = round_trip(mixed_writer(true));
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"a.u8", "b.bf16", "c.f32", "d.i64", "e.f16", "z.f64"}));
  EXPECT_THAT(reader.doubles("b.bf16"), ElementsAreArray(std::vector<double>{1, 2, 3}));
  EXPECT_THAT(reader.int64s("a.u8"), ElementsAreArray(std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_THAT(reader.doubles("z.f64"), ElementsAreArray(std::vector<double>{0.5, -0.25}));
  EXPECT_THAT(reader.doubles("c.f32"), ElementsAreArray(std::vector<double>{7}));
  EXPECT_THAT(reader.int64s("d.i64"), ElementsAreArray(std::vector<std::int64_t>{-9}));
  EXPECT_THAT(reader.doubles("e.f16"), ElementsAreArray(std::vector<double>{0.5}));
  EXPECT_EQ(reader.metadata(), (Metadata{{"k1", "v1"}, {"k2", "v2"}}));
}

}  // namespace
}  // namespace dflash::safetensors
