#include "io/safetensors_reader.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "io/errors.hpp"
#include "io/strict_json.hpp"

namespace dflash::safetensors {

namespace {

// Reads exactly `count` bytes at `offset` of an open stream, or throws naming the file: a file
// that shrank after its header was validated must not yield a short tensor.
void read_exactly(std::ifstream& file, const std::string& source, std::uint64_t offset, std::byte* out,
                  std::uint64_t count) {
  file.seekg(static_cast<std::streamoff>(offset));
  file.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(count));
  if (!file || static_cast<std::uint64_t>(file.gcount()) != count) {
    throw InputError(str(source, ": could not read ", count, " bytes at offset ", offset,
                         " (file truncated or changed while open?)"));
  }
}

std::ifstream open_for_reading(const std::filesystem::path& path, const std::string& source) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(str(source, ": cannot open for reading: ", std::strerror(errno)));
  return file;
}

}  // namespace

Reader Reader::open_file(const std::filesystem::path& path) {
  Reader reader;
  reader.source_ = path.string();
  reader.path_ = path;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw InputError(
        str(reader.source_, ": not a readable regular file", error ? str(" (", error.message(), ")") : std::string()));
  }
  const std::uint64_t file_size = std::filesystem::file_size(path, error);
  if (error) throw InputError(str(reader.source_, ": cannot get the file size: ", error.message()));

  std::ifstream file = open_for_reading(path, reader.source_);
  std::vector<std::byte> length_field(std::min<std::uint64_t>(file_size, kHeaderLengthBytes));
  read_exactly(file, reader.source_, 0, length_field.data(), length_field.size());
  const std::uint64_t header_length = checked_header_length(reader.source_, length_field, file_size);

  std::string header_text(header_length, '\0');
  read_exactly(file, reader.source_, kHeaderLengthBytes, reinterpret_cast<std::byte*>(header_text.data()),
               header_length);
  reader.layout_ = parse_layout(reader.source_, header_text, file_size);
  return reader;
}

Reader Reader::from_bytes(std::span<const std::byte> bytes, std::string source) {
  Reader reader;
  reader.source_ = std::move(source);
  const std::uint64_t header_length =
      checked_header_length(reader.source_, bytes.first(std::min(bytes.size(), kHeaderLengthBytes)), bytes.size());
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data()) + kHeaderLengthBytes, header_length);
  reader.layout_ = parse_layout(reader.source_, header_text, bytes.size());
  reader.memory_ = std::make_shared<const std::vector<std::byte>>(bytes.begin(), bytes.end());
  return reader;
}

std::vector<std::string> Reader::names() const {
  std::vector<std::string> names;
  names.reserve(layout_.tensors.size());
  for (const auto& [name, info] : layout_.tensors) names.push_back(name);
  return names;
}

bool Reader::contains(std::string_view name) const { return layout_.tensors.find(name) != layout_.tensors.end(); }

const TensorInfo& Reader::info(std::string_view name) const {
  const auto it = layout_.tensors.find(name);
  if (it == layout_.tensors.end()) throw InputError(str(source_, ": no tensor named ", clipped_quote(name)));
  return it->second;
}

TensorData Reader::tensor(std::string_view name) const {
  TensorData tensor;
  tensor.source = source_;
  tensor.info = info(name);
  tensor.bytes.resize(tensor.info.byte_size());
  const std::uint64_t offset = layout_.data_start + tensor.info.begin;
  if (memory_) {
    // The header was validated against this very buffer: the range is inside it.
    std::copy_n(memory_->begin() + static_cast<std::ptrdiff_t>(offset), tensor.bytes.size(), tensor.bytes.begin());
  } else if (!tensor.bytes.empty()) {
    std::ifstream file = open_for_reading(path_, source_);
    read_exactly(file, source_, offset, tensor.bytes.data(), tensor.bytes.size());
  }
  return tensor;
}

void Reader::read_float_elements(std::string_view name, std::uint64_t first, std::span<double> out) const {
  const TensorInfo& t = info(name);
  if (!dtype_is_float(t.dtype)) {
    throw InputError(
        str(source_, ": tensor ", clipped_quote(name), ": dtype ", dtype_name(t.dtype), " is not a float dtype"));
  }
  const std::uint64_t n = t.element_count();
  if (first > n || out.size() > n - first) {
    throw InputError(str(source_, ": tensor ", clipped_quote(name), ": elements [", first, ", ", first + out.size(),
                         ") are outside its ", n));
  }
  if (out.empty()) return;
  const std::size_t size = dtype_size(t.dtype);
  const std::uint64_t offset = layout_.data_start + t.begin + first * size;
  if (memory_) {
    load_float_elements(t.dtype, memory_->data() + offset, out.size(), out.data());
    return;
  }
  std::vector<std::byte> bytes(out.size() * size);
  std::ifstream file = open_for_reading(path_, source_);
  read_exactly(file, source_, offset, bytes.data(), bytes.size());
  load_float_elements(t.dtype, bytes.data(), out.size(), out.data());
}

std::vector<double> Reader::doubles(std::string_view name) const { return to_doubles(tensor(name)); }

std::vector<std::int64_t> Reader::int64s(std::string_view name) const { return to_int64s(tensor(name)); }

}  // namespace dflash::safetensors
