// The reader refuses every malformed file with a dflash::InputError that names the file and the
// problem: one test per kind of malformation (SPEC §9 golden files are read by this reader, and
// so are weight files downloaded from anywhere).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "io/safetensors.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::safetensors {
namespace {

using testing::file_bytes;
using ::testing::HasSubstr;
using testing::input_error_message;
using ::testing::StartsWith;
using testing::zero_bytes;

// The message from reading `bytes` as the file "model.safetensors".
std::string rejection(const std::vector<std::byte>& bytes) {
  return input_error_message([&] { Reader::from_bytes(bytes, "model.safetensors"); });
}

std::string rejection(std::string_view header, std::size_t data_bytes = 0) {
  return rejection(file_bytes(header, zero_bytes(data_bytes)));
}

TEST(SafetensorsMalformed, ValidBaselineIsAccepted) {
  // The malformed cases below are small edits of this file.
  const Reader reader =
      Reader::from_bytes(file_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", zero_bytes(16)));
  EXPECT_EQ(reader.names(), std::vector<std::string>{"a"});
}

TEST(SafetensorsMalformed, FileShorterThanLengthField) {
  const std::string message = rejection(testing::bytes_of({1, 0, 0}));
  EXPECT_THAT(message, StartsWith("model.safetensors: "));
  EXPECT_THAT(message, HasSubstr("file is 3 bytes, shorter than the 8-byte header length"));
}

TEST(SafetensorsMalformed, EmptyFile) {
  EXPECT_THAT(rejection(std::vector<std::byte>{}), HasSubstr("file is 0 bytes"));
}

TEST(SafetensorsMalformed, HeaderLengthBeyondFile) {
  std::vector<std::byte> bytes = file_bytes(R"({})");
  bytes[0] = std::byte{40};  // claims 40 header bytes, the file has 2
  EXPECT_THAT(rejection(bytes), HasSubstr("header length 40 reaches beyond the end of the file (10 bytes)"));
}

TEST(SafetensorsMalformed, HeaderLengthHugeDoesNotWrap) {
  // 2^64 - 1: a reader computing 8 + N would wrap around to 7.
  std::vector<std::byte> bytes = file_bytes(R"({})");
  for (int i = 0; i < 8; ++i) bytes[i] = std::byte{0xFF};
  EXPECT_THAT(rejection(bytes), HasSubstr("header length 18446744073709551615 exceeds the 100000000-byte limit"));
}

TEST(SafetensorsMalformed, HeaderOver100MB) {
  // The limit is checked before the file size, so a small buffer is enough to trip it.
  std::vector<std::byte> bytes = file_bytes(R"({})");
  const std::uint64_t length = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((length >> (8 * i)) & 0xFFu);
  EXPECT_THAT(rejection(bytes), HasSubstr("header length 100000001 exceeds the 100000000-byte limit"));
}

TEST(SafetensorsMalformed, InvalidUtf8) {
  const std::string message = rejection("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4);
  EXPECT_THAT(message, HasSubstr("model.safetensors: header: not valid UTF-8 (byte 0xff at offset 3)"));
}

TEST(SafetensorsMalformed, OverlongUtf8) {
  // 0xC0 0xAF is an overlong '/': well-formed-looking, but forbidden.
  EXPECT_THAT(rejection("{\"\xc0\xaf\":1}"), HasSubstr("not valid UTF-8"));
}

TEST(SafetensorsMalformed, EncodedSurrogateUtf8) {
  EXPECT_THAT(rejection("{\"\xed\xa0\x80\":1}"), HasSubstr("not valid UTF-8"));
}

TEST(SafetensorsMalformed, InvalidJson) {
  const std::string message = rejection(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})", 16);
  EXPECT_THAT(message, HasSubstr("model.safetensors: header: invalid JSON"));
}

TEST(SafetensorsMalformed, EmptyHeader) { EXPECT_THAT(rejection(""), HasSubstr("invalid JSON")); }

TEST(SafetensorsMalformed, JsonNotAnObject) {
  EXPECT_THAT(rejection(R"([1, 2])"), HasSubstr("header is an array, not a JSON object"));
}

TEST(SafetensorsMalformed, HeaderNotBeginningWithBrace) {
  EXPECT_THAT(rejection(R"(  {})"), HasSubstr("header must begin with '{'"));
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  EXPECT_THAT(rejection(R"({"a":[1,2]})"), HasSubstr("tensor 'a' entry is an array, not an object"));
}

TEST(SafetensorsMalformed, MissingField) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'a' is missing field 'shape'"));
}

TEST(SafetensorsMalformed, UnknownField) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[],"data_offset":[0,4]}})", 4),
              HasSubstr("tensor 'a' has unknown field 'data_offset'"));
}

TEST(SafetensorsMalformed, DtypeNotAString) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'a' field 'dtype' is 4, not a string"));
}

TEST(SafetensorsMalformed, ShapeNotAnArray) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":"2x2","data_offsets":[0,16]}})", 16),
              HasSubstr("tensor 'a' field 'shape' is a string, not an array"));
}

TEST(SafetensorsMalformed, DataOffsetsNotAPair) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4,8]}})", 8),
              HasSubstr("tensor 'a' field 'data_offsets' is an array of 3, not an array of 2 integers"));
}

TEST(SafetensorsMalformed, DataOffsetNegative) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[-4,0]}})"),
              HasSubstr("tensor 'a' data_offsets[0] is -4, not a non-negative integer"));
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_THAT(
      rejection(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4),
      HasSubstr("tensor 'a' has unsupported dtype 'F8_E4M3' (supported: F64, F32, BF16, F16, I64, I32, U8, BOOL)"));
}

TEST(SafetensorsMalformed, NegativeShapeDimension) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]}})", 16),
              HasSubstr("tensor 'a' shape dimension 1 is -2, not a non-negative integer"));
}

TEST(SafetensorsMalformed, NonIntegerShapeDimension) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}})", 10),
              HasSubstr("tensor 'a' shape dimension 0 is 2.5, not a non-negative integer"));
}

TEST(SafetensorsMalformed, ShapeDimensionBeyondInt64) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
              HasSubstr("tensor 'a' shape dimension 0 is 9223372036854775808, not a non-negative integer"));
}

TEST(SafetensorsMalformed, ShapeProductOverflow) {
  // 2^32 × 2^32 elements: the element count wraps to 0 in 64 bits, matching the empty range.
  EXPECT_THAT(rejection(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
              HasSubstr("tensor 'a' shape [4294967296, 4294967296] × 1-byte elements overflows 64 bits"));
}

TEST(SafetensorsMalformed, ShapeBytesOverflow) {
  // 2^62 elements fit, 2^62 × 4 bytes do not.
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
              HasSubstr("overflows 64 bits"));
}

TEST(SafetensorsMalformed, ByteRangeDoesNotMatchShape) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12),
              HasSubstr("model.safetensors: tensor 'a' data_offsets [0, 12] hold 12 bytes but dtype F32 × shape "
                        "[2, 2] needs 16"));
}

TEST(SafetensorsMalformed, BeginAfterEnd) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[8,4]}})", 8),
              HasSubstr("tensor 'a' data_offsets [8, 4]: begin is after end"));
}

TEST(SafetensorsMalformed, RangeOutOfBounds) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
              HasSubstr("tensor 'a' data_offsets [0, 16] reach beyond the end of the 12-byte data section"));
}

TEST(SafetensorsMalformed, RangeOutOfBoundsNearUint64Max) {
  // An end near 2^64 whose size would match after a wrapping subtraction.
  EXPECT_THAT(rejection(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551614,2]}})", 4),
              HasSubstr("begin is after end"));
}

TEST(SafetensorsMalformed, OverlappingRanges) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        12),
              HasSubstr("tensor 'b' data_offsets [4, 12] overlap tensor 'a' [0, 8]"));
}

TEST(SafetensorsMalformed, IdenticalRangesOverlap) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                        4),
              HasSubstr("overlap"));
}

TEST(SafetensorsMalformed, HoleBetweenRanges) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                        12),
              HasSubstr("hole in the data section: bytes [4, 8) before tensor 'b' belong to no tensor"));
}

TEST(SafetensorsMalformed, HoleAtStart) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
              HasSubstr("hole in the data section: bytes [0, 4)"));
}

TEST(SafetensorsMalformed, TrailingBytesAfterLastRange) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 9),
              HasSubstr("trailing bytes: the data section holds 9 bytes but the tensors cover only 4"));
}

TEST(SafetensorsMalformed, DataWithoutTensors) {
  EXPECT_THAT(rejection(R"({})", 3), HasSubstr("trailing bytes: the data section holds 3 bytes"));
}

TEST(SafetensorsMalformed, DuplicateTensorNames) {
  // nlohmann::json alone would keep the second entry and accept the file.
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        8),
              HasSubstr("model.safetensors: header: duplicate key 'a'"));
}

TEST(SafetensorsMalformed, DuplicateFieldWithinEntry) {
  EXPECT_THAT(rejection(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("duplicate key 'dtype'"));
}

TEST(SafetensorsMalformed, DuplicateMetadata) {
  EXPECT_THAT(rejection(R"({"__metadata__":{},"__metadata__":{}})"), HasSubstr("duplicate key '__metadata__'"));
}

TEST(SafetensorsMalformed, MetadataNotAnObject) {
  EXPECT_THAT(rejection(R"({"__metadata__":["format","pt"]})"),
              HasSubstr("__metadata__ is an array, not an object of strings"));
}

TEST(SafetensorsMalformed, MetadataValueNotAString) {
  EXPECT_THAT(rejection(R"({"__metadata__":{"format":"pt","step":3}})"),
              HasSubstr("__metadata__ entry 'step' is 3, not a string"));
}

TEST(SafetensorsMalformed, NestingTooDeep) {
  std::string deep = R"({"a":{"dtype":"F32","shape":[[[[[1]]]]],"data_offsets":[0,4]}})";
  EXPECT_THAT(rejection(deep, 4), HasSubstr("JSON nested deeper than 4 levels"));
  // Very deep nesting is refused as soon as the limit is passed, without recursion.
  EXPECT_THAT(rejection(std::string(1'000'000, '[')), HasSubstr("nested deeper"));
}

TEST(SafetensorsMalformed, LongNamesAreCutShortInMessages) {
  // A hostile name can be 100 MB; the message quotes its start and says how long it was.
  const std::string name(10'000, 'n');
  const std::string message = rejection(R"({")" + name + R"(":{"dtype":"X","shape":[],"data_offsets":[0,0]}})");
  EXPECT_THAT(message, HasSubstr("tensor '" + std::string(200, 'n') + "'... (10000 bytes) has unsupported dtype 'X'"));
  EXPECT_LT(message.size(), 400u);
}

TEST(SafetensorsMalformed, EveryProperPrefixOfAValidFileIsRejected) {
  Writer writer;
  const std::vector<double> values = {1.0, 2.0, 3.0};
  writer.add_floats("w", Dtype::F32, {3}, values);
  writer.set_metadata("format", "pt");
  const std::vector<std::byte> bytes = writer.to_bytes();
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    const std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length));
    EXPECT_THROW(Reader::from_bytes(prefix), dflash::InputError) << "prefix of " << length << " bytes";
  }
  EXPECT_NO_THROW(Reader::from_bytes(bytes));
}

TEST(SafetensorsMalformed, MalformedFileOnDiskNamesThePath) {
  testing::ScratchDirectory directory;
  const auto path = directory / "broken.safetensors";
  testing::write_whole_file(path,
                            file_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", zero_bytes(12)));
  const std::string message = input_error_message([&] { Reader::open_file(path); });
  EXPECT_THAT(message, StartsWith(path.string() + ": tensor 'a' data_offsets [0, 12] hold 12 bytes"));
}

TEST(SafetensorsMalformed, MissingFileNamesThePath) {
  testing::ScratchDirectory directory;
  const auto path = directory / "absent.safetensors";
  EXPECT_THAT(input_error_message([&] { Reader::open_file(path); }),
              HasSubstr(path.string() + ": not a readable regular file"));
}

TEST(SafetensorsMalformed, ShortFileOnDisk) {
  testing::ScratchDirectory directory;
  const auto path = directory / "short.safetensors";
  testing::write_whole_file(path, testing::bytes_of({2, 0, 0, 0}));
  EXPECT_THAT(input_error_message([&] { Reader::open_file(path); }), HasSubstr("file is 4 bytes"));
}

}  // namespace
}  // namespace dflash::safetensors
