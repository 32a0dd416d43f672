// Compatibility with the format itself, not just with our own reader: files assembled byte by
// byte from the format description (8-byte little-endian length, JSON header, little-endian C-order
// data) are compared with the writer's output and read by the reader. The Python `safetensors`
// package is not available to cross-check, so these bytes are the independent witness.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::safetensors {
namespace {

using testing::bytes_of;
using ::testing::ElementsAreArray;

TEST(SafetensorsHandmade, WriterOutputMatchesBytesBuiltFromTheFormat) {
  Writer writer;
  writer.add_floats("a", Dtype::F32, {2}, std::vector<double>{1.0, -2.0});
  writer.add_integers("b", Dtype::I64, {}, std::vector<std::int64_t>{7});
  writer.set_metadata("format", "pt");

  // 138 bytes of JSON + 6 spaces = 144 = 0x90: metadata first, then tensors in data order (8-byte
  // I64 before 4-byte F32), fields in the order dtype, shape, data_offsets, no whitespace.
  const std::string header = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"
                             "      ";
  ASSERT_EQ(header.size(), 144u);
  std::vector<std::byte> expected = bytes_of({0x90, 0, 0, 0, 0, 0, 0, 0});
  for (char c : header) expected.push_back(static_cast<std::byte>(c));
  const std::vector<std::byte> data = bytes_of({
      0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // b = 7, I64 little-endian
      0x00, 0x00, 0x80, 0x3F,                          // a[0] = 1.0f  (0x3F800000)
      0x00, 0x00, 0x00, 0xC0,                          // a[1] = -2.0f (0xC0000000)
  });
  expected.insert(expected.end(), data.begin(), data.end());

  EXPECT_EQ(writer.to_bytes(), expected);
}

// The files that the reference implementation's own serialization tests pin byte for byte
// (huggingface/safetensors, safetensors/src/tensor.rs: test_serialization, test_empty,
// test_serialization_forced_alignement), assembled here from their header text and data.
// `length` is the header length the reference states; the header text must have exactly it.
std::vector<std::byte> header_and_data(std::uint64_t length, const std::string& header,
                                       const std::vector<std::byte>& data) {
  EXPECT_EQ(header.size(), length) << header;
  return testing::file_bytes(header, data);
}

// 0.0f, 1.0f, ..., 5.0f as little-endian F32 (0x00000000, 0x3F800000, 0x40000000, 0x40400000,
// 0x40800000, 0x40A00000).
const std::vector<std::byte> kZeroToFiveF32 =
    bytes_of({0, 0, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xA0, 0x40});

TEST(SafetensorsHandmade, MatchesTheReferenceImplementationsSerializationTests) {
  const std::vector<double> zero_to_five = {0, 1, 2, 3, 4, 5};
  {
    Writer writer;  // 64 bytes of JSON: already a multiple of 8, no padding
    writer.add_floats("attn.0", Dtype::F32, {1, 2, 3}, zero_to_five);
    EXPECT_EQ(
        writer.to_bytes(),
        header_and_data(64, R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", kZeroToFiveF32));
  }
  {
    Writer writer;  // 65 bytes of JSON + 7 spaces
    writer.add_floats("attn0", Dtype::F32, {1, 1, 2, 3}, zero_to_five);
    EXPECT_EQ(writer.to_bytes(), header_and_data(72,
                                                 R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})"
                                                 "       ",
                                                 kZeroToFiveF32));
  }
  {
    Writer writer;  // no tensors: "{}" + 6 spaces
    EXPECT_EQ(writer.to_bytes(), header_and_data(8, "{}      ", {}));
    writer.set_metadata("framework", "pt");  // 35 bytes of JSON + 5 spaces
    EXPECT_EQ(writer.to_bytes(), header_and_data(40,
                                                 R"({"__metadata__":{"framework":"pt"}})"
                                                 "     ",
                                                 {}));
  }
}

TEST(SafetensorsHandmade, TensorsAreGroupedByDtypeLikeTheReferenceImplementation) {
  // The reference orders by dtype (I64, F64, F32, I32, BF16, F16, U8, BOOL), then by name: "z"
  // (I64) before "a" (F64) even though both are 8-byte, "y" (F32) before "b" (I32).
  Writer writer;
  writer.add_floats("a", Dtype::F64, {}, std::vector<double>{1.0});
  writer.add_integers("z", Dtype::I64, {}, std::vector<std::int64_t>{2});
  writer.add_integers("b", Dtype::I32, {}, std::vector<std::int64_t>{3});
  writer.add_floats("y", Dtype::F32, {}, std::vector<double>{4.0});
  const std::string header =
      R"({"z":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"a":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
      R"("y":{"dtype":"F32","shape":[],"data_offsets":[16,20]},"b":{"dtype":"I32","shape":[],"data_offsets":[20,24]}})";
  ASSERT_EQ(header.size(), 214u);
  EXPECT_EQ(writer.to_bytes(), header_and_data(216, header + "  ",
                                               bytes_of({
                                                   2, 0, 0,    0,    0, 0, 0,    0,     // z = 2 (I64)
                                                   0, 0, 0,    0,    0, 0, 0xF0, 0x3F,  // a = 1.0 (F64)
                                                   0, 0, 0x80, 0x40,                    // y = 4.0f (F32)
                                                   3, 0, 0,    0,                       // b = 3 (I32)
                                               })));
}

TEST(SafetensorsHandmade, ReadsAnUnpaddedHeaderWithWhitespaceAndAnyKeyOrder) {
  // As older writers produce: header length not a multiple of 8, pretty JSON, metadata last.
  const std::string header = R"({"w": {"data_offsets": [0, 4], "shape": [2], "dtype": "BF16"},)"
                             "\n"
                             R"( "h": {"dtype": "F16", "shape": [1, 1], "data_offsets": [4, 6]},)"
                             R"( "__metadata__": {"format": "pt"}})";
  ASSERT_NE(header.size() % 8, 0u);
  const std::vector<std::byte> bytes = testing::file_bytes(header, bytes_of({
                                                                       0xC0, 0x3F,  // 1.5  bf16 0x3FC0
                                                                       0x00, 0xBF,  // -0.5 bf16 0xBF00
                                                                       0x00, 0x3C,  // 1.0  f16 0x3C00
                                                                   }));
  const Reader reader = Reader::from_bytes(bytes, "handmade.safetensors");
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"h", "w"}));
  EXPECT_EQ(reader.info("w").dtype, Dtype::BF16);
  EXPECT_EQ(reader.info("w").shape, Shape{2});
  EXPECT_THAT(reader.doubles("w"), ElementsAreArray(std::vector<double>{1.5, -0.5}));
  EXPECT_EQ(reader.info("h").shape, (Shape{1, 1}));
  EXPECT_THAT(reader.doubles("h"), ElementsAreArray(std::vector<double>{1.0}));
  EXPECT_EQ(reader.metadata(), (Metadata{{"format", "pt"}}));
  EXPECT_EQ(reader.layout().data_start, 8 + header.size());
}

TEST(SafetensorsHandmade, ReadsTrailingSpacePaddingAndEmptyTensorsAtAnyBoundary) {
  // Empty tensors occupy no bytes: [0, 0] and [8, 8] are legal beside [0, 8], whatever their names
  // sort like: "z0" at 0 sorts after "x", which starts there too, and must not be read as overlapping it.
  const std::string header = R"({"e0":{"dtype":"F64","shape":[0],"data_offsets":[0,0]},)"
                             R"("x":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                             R"("z0":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
                             R"("e1":{"dtype":"I32","shape":[2,0],"data_offsets":[8,8]}})"
                             "   ";
  const Reader reader = Reader::from_bytes(
      testing::file_bytes(header, bytes_of({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F})));  // 1.0
  EXPECT_THAT(reader.doubles("x"), ElementsAreArray(std::vector<double>{1.0}));
  EXPECT_TRUE(reader.doubles("e0").empty());
  EXPECT_TRUE(reader.int64s("e1").empty());
  EXPECT_TRUE(reader.doubles("z0").empty());
}

TEST(SafetensorsHandmade, ReadsUnicodeEscapesInNames) {
  // "\u00e9" in the JSON is the name "é" (UTF-8 C3 A9).
  const Reader reader = Reader::from_bytes(
      testing::file_bytes(R"({"caf\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", bytes_of({42})));
  EXPECT_THAT(reader.int64s("caf\xc3\xa9"), ElementsAreArray(std::vector<std::int64_t>{42}));
}

}  // namespace
}  // namespace dflash::safetensors
