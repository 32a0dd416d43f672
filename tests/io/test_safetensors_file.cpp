// Writing to disk: the file reads back, rewrites are byte-identical, and a failed write leaves an
// existing file whole (temporary file, then rename) with no temporary left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <bit>
#include <csignal>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "io/safetensors.hpp"
#include "io/sha256.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash::safetensors {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::read_whole_file;
using testing::ScratchDirectory;

Writer small_writer(double value) {
  Writer writer;
  writer.add_floats("x", Dtype::F64, {2}, std::vector<double>{value, -value});
  writer.set_metadata("format", "dflash-golden");
  return writer;
}

std::vector<std::string> directory_entries(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

template <class Action>
std::string write_error_message(Action&& action) {
  return testing::error_message<std::runtime_error>(std::forward<Action>(action));
}

TEST(SafetensorsFile, WriteThenReadBack) {
  ScratchDirectory directory;
  const auto path = directory / "golden.safetensors";
  small_writer(1.25).write_file(path);
  const Reader reader = Reader::open_file(path);
  EXPECT_EQ(reader.source(), path.string());
  EXPECT_THAT(reader.doubles("x"), ElementsAreArray(std::vector<double>{1.25, -1.25}));
  EXPECT_EQ(reader.metadata().at("format"), "dflash-golden");
  EXPECT_EQ(read_whole_file(path), small_writer(1.25).to_bytes());
  EXPECT_EQ(directory_entries(directory.path()), std::vector<std::string>{"golden.safetensors"});
}

// A viewed tensor (add_floats_view, encoded a piece at a time as the file is written) gives the
// bytes add_floats gives, in every float dtype, beside copied ones, for tensors of several pieces
// with a part piece at the end, of one value and of none; and the same bytes through to_bytes.
TEST(SafetensorsFile, ViewedTensorsAreWrittenAsTheSameBytesAsCopiedOnes) {
  ScratchDirectory directory;
  const std::size_t long_tensor = (std::size_t(1) << 17) * 2 + 5;  // two whole pieces and a part
  std::vector<double> values(long_tensor);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = (double(i) - 1e5) / 3.0 * (i % 7 == 0 ? 1e-30 : 1.0);
  const std::vector<double> one{-0.1}, none;
  Writer copied, viewed;
  for (const Dtype dtype : {Dtype::F64, Dtype::F32, Dtype::BF16, Dtype::F16}) {
    const std::string d(dtype_name(dtype));
    copied.add_floats("long." + d, dtype, {std::int64_t(long_tensor)}, values);
    viewed.add_floats_view("long." + d, dtype, {std::int64_t(long_tensor)}, values);
    copied.add_floats("one." + d, dtype, {1}, one);
    viewed.add_floats_view("one." + d, dtype, {1}, one);
    copied.add_floats("none." + d, dtype, {0, 3}, none);
    viewed.add_floats_view("none." + d, dtype, {0, 3}, none);
  }
  copied.add_integers("ids", Dtype::I64, {2}, std::vector<std::int64_t>{4, -9});
  viewed.add_integers("ids", Dtype::I64, {2}, std::vector<std::int64_t>{4, -9});
  copied.write_file(directory / "copied.safetensors");
  viewed.write_file(directory / "viewed.safetensors");
  const std::vector<std::byte> bytes = read_whole_file(directory / "copied.safetensors");
  EXPECT_EQ(read_whole_file(directory / "viewed.safetensors"), bytes);
  EXPECT_EQ(viewed.to_bytes(), bytes);
  EXPECT_THAT(Reader::open_file(directory / "viewed.safetensors").doubles("long.F64"), ElementsAreArray(values));
  EXPECT_THROW(viewed.add_floats_view("ids2", Dtype::I64, {1}, one), InputError);
  EXPECT_THROW(viewed.add_floats_view("short", Dtype::F32, {2}, one), InputError);
}

// A viewed fp32 tensor (a device backend's gathered master weights and moments) gives the bytes
// add_floats gives for the same values as doubles, in every float dtype (rounded from the float
// where the dtype is narrower), over several pieces and a part piece, through write_file and
// to_bytes.
TEST(SafetensorsFile, ViewedFloatTensorsAreWrittenAsTheSameBytesAsTheirDoubles) {
  ScratchDirectory directory;
  const std::size_t long_tensor = (std::size_t(1) << 17) * 2 + 5;
  std::vector<float> floats(long_tensor);
  for (std::size_t i = 0; i < floats.size(); ++i)
    floats[i] = float((double(i) - 1e5) / 3.0 * (i % 7 == 0 ? 1e-30 : 1.0));
  const std::vector<double> doubles(floats.begin(), floats.end());
  Writer copied, viewed;
  for (const Dtype dtype : {Dtype::F64, Dtype::F32, Dtype::BF16, Dtype::F16}) {
    const std::string d(dtype_name(dtype));
    copied.add_floats("long." + d, dtype, {std::int64_t(long_tensor)}, doubles);
    viewed.add_floats_view("long." + d, dtype, {std::int64_t(long_tensor)}, std::span<const float>(floats));
  }
  copied.write_file(directory / "copied.safetensors");
  viewed.write_file(directory / "viewed.safetensors");
  const std::vector<std::byte> bytes = read_whole_file(directory / "copied.safetensors");
  EXPECT_EQ(read_whole_file(directory / "viewed.safetensors"), bytes);
  EXPECT_EQ(viewed.to_bytes(), bytes);
  EXPECT_THAT(Reader::open_file(directory / "viewed.safetensors").doubles("long.F32"), ElementsAreArray(doubles));
  EXPECT_THROW(viewed.add_floats_view("short", Dtype::F32, {2}, std::span<const float>(floats.data(), 1)), InputError);
  EXPECT_THROW(viewed.add_floats_view("ids", Dtype::I32, {1}, std::span<const float>(floats.data(), 1)), InputError);
}

// file_size plans the file a Writer of the same tensors and metadata writes, to the byte: with and
// without metadata, every dtype, names out of order, empty and 0-sized tensors, and offsets of
// several digits (the header holds them as text); it refuses what the Writer refuses.
TEST(SafetensorsFile, FileSizeIsTheSizeOfTheFileTheWriterWrites) {
  std::vector<double> big(std::size_t(1) << 20, 0.5);
  Writer w;
  std::vector<TensorSpec> specs;
  const auto add = [&](const std::string& name, Dtype dtype, const Shape& shape) {
    std::size_t n = 1;
    for (const std::int64_t d : shape) n *= std::size_t(d);
    specs.push_back({name, dtype, shape});
    if (dtype_is_float(dtype)) {
      w.add_floats_view(name, dtype, shape, std::span<const double>(big.data(), n));
    } else {
      w.add_integers(name, dtype, shape, std::vector<std::int64_t>(n, 1));
    }
  };
  EXPECT_EQ(file_size(specs), w.to_bytes().size()) << "no tensors";
  add("z.last", Dtype::BF16, {1024, 1024});
  add("a.first", Dtype::F32, {3, 5});
  add("m.ids", Dtype::I64, {7});
  add("m.mask", Dtype::U8, {9});
  add("b.wide", Dtype::F64, {1 << 19});
  add("e.none", Dtype::F16, {0, 4});
  add("n.flag", Dtype::BOOL, {2});
  EXPECT_EQ(file_size(specs), w.to_bytes().size());
  w.set_metadata("format", "pt");
  w.set_metadata("note", "a longer value than the others");
  const Metadata metadata = {{"format", "pt"}, {"note", "a longer value than the others"}};
  EXPECT_EQ(file_size(specs, metadata), w.to_bytes().size());
  EXPECT_LT(file_size(specs), file_size(specs, metadata));

  specs.push_back({"a.first", Dtype::F64, {1}});
  EXPECT_THROW(file_size(specs), InputError) << "a name given twice, in another dtype";
  specs.back() = {"__metadata__", Dtype::F64, {1}};
  EXPECT_THROW(file_size(specs), InputError);
  specs.back() = {"huge", Dtype::F64, {std::int64_t(1) << 40, std::int64_t(1) << 40}};
  EXPECT_THROW(file_size(specs), InputError);
}

// The hash write_file returns, computed as the bytes are written, is the file's (what a checkpoint
// records and a resume verifies): for copied and viewed tensors of several pieces, and for a file
// of a header alone.
TEST(SafetensorsFile, WriteFileReturnsTheSha256OfTheFileItWrote) {
  ScratchDirectory directory;
  std::vector<double> values((std::size_t(1) << 17) + 3);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = double(i % 1000) * 0.001 - 0.5;
  Writer writer;
  writer.add_floats("copied", Dtype::BF16, {3}, std::vector<double>{1.0, 2.0, 3.0});
  writer.add_floats_view("viewed", Dtype::F32, {std::int64_t(values.size())}, values);
  writer.set_metadata("format", "pt");
  const auto path = directory / "hashed.safetensors";
  const std::string hash = writer.write_file(path);
  EXPECT_EQ(hash, sha256_file_hex(path));
  EXPECT_EQ(hash.size(), 64u);
  const auto empty = directory / "empty.safetensors";
  const std::string empty_hash = Writer().write_file(empty);
  EXPECT_EQ(empty_hash, sha256_file_hex(empty));
  EXPECT_NE(empty_hash, hash);
}

TEST(SafetensorsFile, RewritingGivesByteIdenticalFiles) {
  ScratchDirectory directory;
  small_writer(3.0).write_file(directory / "one.safetensors");
  small_writer(3.0).write_file(directory / "two.safetensors");
  EXPECT_EQ(read_whole_file(directory / "one.safetensors"), read_whole_file(directory / "two.safetensors"));
}

TEST(SafetensorsFile, ReplacesAnExistingFileWhole) {
  ScratchDirectory directory;
  const auto path = directory / "checkpoint.safetensors";
  small_writer(1.0).write_file(path);
  small_writer(2.0).write_file(path);
  EXPECT_THAT(Reader::open_file(path).doubles("x"), ElementsAreArray(std::vector<double>{2.0, -2.0}));
  EXPECT_EQ(directory_entries(directory.path()), std::vector<std::string>{"checkpoint.safetensors"});
}

TEST(SafetensorsFile, UnwritableDirectoryIsAClearError) {
  ScratchDirectory directory;
  const auto path = directory / "no-such-directory" / "golden.safetensors";
  const std::string message = write_error_message([&] { small_writer(1.0).write_file(path); });
  EXPECT_THAT(message, HasSubstr("cannot write " + path.string()));
  EXPECT_THAT(message, HasSubstr("cannot create temporary file"));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

// Lowers the file size limit for the lifetime of the object, with SIGXFSZ ignored so that a write
// past the limit fails with EFBIG instead of killing the process. Works as root too, where a
// read-only directory would not stop a write.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &lowered), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

TEST(SafetensorsFile, FailedWriteLeavesTheExistingFileIntact) {
  ScratchDirectory directory;
  const auto path = directory / "golden.safetensors";
  small_writer(1.0).write_file(path);
  const std::vector<std::byte> before = read_whole_file(path);

  Writer big;
  big.add_floats("big", Dtype::F64, {100'000}, std::vector<double>(100'000, 0.5));  // 800 kB
  std::string message;
  {
    const FileSizeLimit limit(64 * 1024);  // the write dies part-way through
    message = write_error_message([&] { big.write_file(path); });
  }
  EXPECT_THAT(message, HasSubstr("cannot write " + path.string()));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_EQ(read_whole_file(path), before);
  EXPECT_EQ(directory_entries(directory.path()), std::vector<std::string>{"golden.safetensors"});
  EXPECT_THAT(Reader::open_file(path).doubles("x"), ElementsAreArray(std::vector<double>{1.0, -1.0}));
}

// A range of a float tensor is what to_doubles gives for those elements, bit for bit, in every
// float dtype, from a file and from memory: every range of a short tensor (empty ones at each end
// included) and pieces of a long one; a range outside the tensor and an integer tensor are refused
// by name.
TEST(SafetensorsFile, ARangeOfElementsIsThoseElementsOfTheWholeTensor) {
  ScratchDirectory directory;
  std::vector<double> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = (double(i) - 400.25) * 0.37 + 1.0 / double(i + 3);
  Writer writer;
  for (const Dtype dtype : {Dtype::F64, Dtype::F32, Dtype::BF16, Dtype::F16}) {
    writer.add_floats(str("x", dtype_name(dtype)), dtype, {25, 40}, values);
    writer.add_floats(str("short", dtype_name(dtype)), dtype, {7},
                      std::vector<double>(values.begin(), values.begin() + 7));
  }
  writer.add_integers("ids", Dtype::I32, {3}, std::vector<std::int64_t>{1, 2, 3});
  const auto path = directory / "ranges.safetensors";
  writer.write_file(path);
  for (const Reader& reader : {Reader::open_file(path), Reader::from_bytes(writer.to_bytes())}) {
    SCOPED_TRACE(reader.source());
    for (const Dtype dtype : {Dtype::F64, Dtype::F32, Dtype::BF16, Dtype::F16}) {
      SCOPED_TRACE(dtype_name(dtype));
      const std::string x = str("x", dtype_name(dtype)), short_name = str("short", dtype_name(dtype));
      const std::vector<double> whole = reader.doubles(x), short_whole = reader.doubles(short_name);
      for (std::size_t first = 0; first <= 7; ++first) {
        for (std::size_t count = 0; first + count <= 7; ++count) {
          std::vector<double> out(count, -7.0);
          reader.read_float_elements(short_name, first, out);
          for (std::size_t i = 0; i < count; ++i)
            EXPECT_EQ(std::bit_cast<std::uint64_t>(out[i]), std::bit_cast<std::uint64_t>(short_whole[first + i]));
        }
      }
      std::vector<double> pieces;
      for (std::size_t first = 0; first < whole.size(); first += 333) {
        std::vector<double> out(std::min<std::size_t>(333, whole.size() - first));
        reader.read_float_elements(x, first, out);
        pieces.insert(pieces.end(), out.begin(), out.end());
      }
      EXPECT_EQ(pieces, whole);
      std::vector<double> one(1);
      EXPECT_THAT(testing::input_error_message([&] { reader.read_float_elements(x, 1000, one); }),
                  HasSubstr(str("tensor '", x, "': elements [1000, 1001) are outside its 1000")));
      std::vector<double> two(2);
      EXPECT_THAT(testing::input_error_message([&] { reader.read_float_elements(x, 999, two); }),
                  HasSubstr("elements [999, 1001) are outside its 1000"));
    }
    std::vector<double> one(1);
    EXPECT_THAT(testing::input_error_message([&] { reader.read_float_elements("ids", 0, one); }),
                HasSubstr("tensor 'ids': dtype I32 is not a float dtype"));
  }
}

TEST(SafetensorsFile, FileTruncatedAfterOpeningIsAnError) {
  // The header was valid when opened; a tensor read after the file shrank must fail, not return
  // short or stale data.
  ScratchDirectory directory;
  const auto path = directory / "shrinking.safetensors";
  small_writer(1.0).write_file(path);
  const Reader reader = Reader::open_file(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_THAT(testing::input_error_message([&] { reader.tensor("x"); }), HasSubstr("could not read 16 bytes"));
}

}  // namespace
}  // namespace dflash::safetensors
