#include "io/safetensors_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <variant>

#include "io/errors.hpp"
#include "io/file_write.hpp"
#include "io/sha256.hpp"
#include "io/strict_json.hpp"

namespace dflash::safetensors {

namespace {

void check_utf8(std::string_view what, const std::string& text) {
  if (const auto bad = first_invalid_utf8_offset(text)) {
    throw InputError(str("safetensors writer: ", what, " is not valid UTF-8 (byte offset ", *bad, ")"));
  }
}

// Where tensors of `dtype` go in the data section: the order of the reference implementation
// (its dtype enum, descending), which lists dtypes by decreasing element size. Sharing its order
// makes our files byte-identical to the Python package's for the same tensors (metadata keys
// aside: it writes them in hash-map order, we sort them).
constexpr std::array<Dtype, 8> kLayoutOrder = {Dtype::I64,  Dtype::F64, Dtype::F32, Dtype::I32,
                                               Dtype::BF16, Dtype::F16, Dtype::U8,  Dtype::BOOL};

std::size_t layout_rank(Dtype dtype) {
  return static_cast<std::size_t>(std::find(kLayoutOrder.begin(), kLayoutOrder.end(), dtype) - kLayoutOrder.begin());
}

// values rounded to the float dtype `dtype`, little-endian, into out[0, values.size() * its size).
template <typename T>
void encode_floats(Dtype dtype, std::span<const T> values, std::byte* out) {
  store_float_elements(dtype, values.data(), values.size(), out);
}

// A viewed tensor is encoded and written this many values at a time (1 MiB of F64).
constexpr std::size_t kViewPieceValues = std::size_t(1) << 17;

// One tensor's line of the header: every file's header is made from these in data order (the
// Writer's, and file_size's plan of one).
struct HeaderRow {
  const std::string* name;
  Dtype dtype;
  const Shape* shape;
  std::size_t bytes;
};

// Data order: by dtype in kLayoutOrder, then by name.
void sort_into_data_order(std::vector<HeaderRow>& rows) {
  std::sort(rows.begin(), rows.end(), [](const HeaderRow& a, const HeaderRow& b) {
    const std::size_t ra = layout_rank(a.dtype), rb = layout_rank(b.dtype);
    return ra != rb ? ra < rb : *a.name < *b.name;
  });
}

// The header JSON text padded with spaces to a multiple of 8 bytes, from rows in data order.
std::string padded_header_of(const Metadata& metadata, const std::vector<HeaderRow>& rows) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) fields[key] = value;
    header[std::string(kMetadataKey)] = std::move(fields);
  }
  std::uint64_t offset = 0;
  for (const HeaderRow& row : rows) {
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    fields["dtype"] = dtype_name(row.dtype);
    fields["shape"] = *row.shape;
    fields["data_offsets"] = {offset, offset + row.bytes};
    header[*row.name] = std::move(fields);
    offset += row.bytes;
  }
  std::string text = header.dump();
  // Spaces up to a multiple of 8: with the 8-byte length field, the data section then starts at
  // a multiple of 8 in the file.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void check_float_dtype(const std::string& name, Dtype dtype) {
  if (!dtype_is_float(dtype)) {
    throw InputError(str("safetensors writer: tensor '", name, "' dtype ", dtype_name(dtype),
                         " is not a float dtype (use add_integers)"));
  }
}

}  // namespace

std::size_t Writer::checked_new_tensor(const std::string& name, Dtype dtype, const Shape& shape,
                                       std::size_t count) const {
  if (name == kMetadataKey) throw InputError(str("safetensors writer: tensor name '", name, "' is reserved"));
  check_utf8(str("tensor name '", name, "'"), name);
  if (tensors_.contains(name)) throw InputError(str("safetensors writer: tensor '", name, "' added twice"));
  const auto expected = checked_element_count(shape, dtype_size(dtype));
  if (!expected) {
    throw InputError(str("safetensors writer: tensor '", name, "' shape ", format_shape(shape),
                         " has a negative dimension or overflows 64 bits"));
  }
  if (*expected != count) {
    throw InputError(str("safetensors writer: tensor '", name, "' has ", count, " values but shape ",
                         format_shape(shape), " needs ", *expected));
  }
  return count * dtype_size(dtype);
}

std::size_t Writer::Entry::view_size() const {
  return std::visit([](const auto& values) { return values.size(); }, view);
}

std::size_t Writer::Entry::byte_size() const {
  return view_size() == 0 ? bytes.size() : view_size() * dtype_size(dtype);
}

void Writer::add_floats(const std::string& name, Dtype dtype, const Shape& shape, std::span<const double> values) {
  check_float_dtype(name, dtype);
  Entry entry{dtype, shape, std::vector<std::byte>(checked_new_tensor(name, dtype, shape, values.size())), {}};
  encode_floats(dtype, values, entry.bytes.data());
  tensors_.emplace(name, std::move(entry));
}

void Writer::add_view(const std::string& name, Dtype dtype, const Shape& shape, FloatView values) {
  check_float_dtype(name, dtype);
  checked_new_tensor(name, dtype, shape, std::visit([](const auto& v) { return v.size(); }, values));
  tensors_.emplace(name, Entry{dtype, shape, {}, values});
}

void Writer::add_floats_view(const std::string& name, Dtype dtype, const Shape& shape, std::span<const double> values) {
  add_view(name, dtype, shape, values);
}

void Writer::add_floats_view(const std::string& name, Dtype dtype, const Shape& shape, std::span<const float> values) {
  add_view(name, dtype, shape, values);
}

void Writer::add_integers(const std::string& name, Dtype dtype, const Shape& shape,
                          std::span<const std::int64_t> values) {
  if (!dtype_is_integer(dtype)) {
    throw InputError(str("safetensors writer: tensor '", name, "' dtype ", dtype_name(dtype),
                         " is not an integer dtype (use add_floats)"));
  }
  Entry entry{dtype, shape, std::vector<std::byte>(checked_new_tensor(name, dtype, shape, values.size())), {}};
  const std::size_t size = dtype_size(dtype);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!integer_fits_dtype(dtype, values[i])) {
      throw InputError(str("safetensors writer: tensor '", name, "' element ", i, " = ", values[i],
                           " does not fit dtype ", dtype_name(dtype)));
    }
    store_integer_element(dtype, values[i], entry.bytes.data() + i * size);
  }
  tensors_.emplace(name, std::move(entry));
}

void Writer::add_bytes(const std::string& name, Dtype dtype, const Shape& shape, std::span<const std::byte> bytes) {
  const std::size_t size = dtype_size(dtype);
  if (bytes.size() % size != 0) {
    throw InputError(str("safetensors writer: tensor '", name, "' has ", bytes.size(), " bytes, not a whole number of ",
                         size, "-byte ", dtype_name(dtype), " elements"));
  }
  checked_new_tensor(name, dtype, shape, bytes.size() / size);
  tensors_.emplace(name, Entry{dtype, shape, std::vector<std::byte>(bytes.begin(), bytes.end()), {}});
}

void Writer::set_metadata(const std::string& key, const std::string& value) {
  check_utf8(str("metadata key '", key, "'"), key);
  check_utf8(str("metadata value of '", key, "'"), value);
  metadata_[key] = value;
}

std::vector<std::pair<const std::string*, const Writer::Entry*>> Writer::data_order() const {
  std::vector<std::pair<const std::string*, const Entry*>> order;
  order.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) order.emplace_back(&name, &entry);
  // tensors_ is sorted by name and stable_sort keeps that order within one dtype: the order of
  // sort_into_data_order.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return layout_rank(a.second->dtype) < layout_rank(b.second->dtype);
  });
  return order;
}

std::string Writer::padded_header() const {
  std::vector<HeaderRow> rows;
  for (const auto& [name, entry] : data_order())
    rows.push_back({name, entry->dtype, &entry->shape, entry->byte_size()});
  return padded_header_of(metadata_, rows);
}

std::uint64_t file_size(std::span<const TensorSpec> tensors, const Metadata& metadata) {
  std::vector<HeaderRow> rows;
  std::set<std::string_view> names;
  std::uint64_t data = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name == kMetadataKey) throw InputError(str("safetensors file size: tensor name '", t.name, "' is reserved"));
    if (!names.insert(t.name).second) throw InputError(str("safetensors file size: tensor '", t.name, "' given twice"));
    const auto count = checked_element_count(t.shape, dtype_size(t.dtype));
    if (!count) {
      throw InputError(str("safetensors file size: tensor '", t.name, "' shape ", format_shape(t.shape),
                           " has a negative dimension or overflows 64 bits"));
    }
    rows.push_back({&t.name, t.dtype, &t.shape, *count * dtype_size(t.dtype)});
    data += rows.back().bytes;
  }
  sort_into_data_order(rows);
  return kHeaderLengthBytes + padded_header_of(metadata, rows).size() + data;
}

std::vector<std::byte> Writer::to_bytes() const {
  const std::string header = padded_header();
  std::vector<std::byte> bytes(kHeaderLengthBytes + header.size());
  store_le_u64(header.size(), bytes.data());
  std::memcpy(bytes.data() + kHeaderLengthBytes, header.data(), header.size());
  for (const auto& [name, entry] : data_order()) {
    if (entry->view_size() == 0) {
      bytes.insert(bytes.end(), entry->bytes.begin(), entry->bytes.end());
      continue;
    }
    const std::size_t at = bytes.size();
    bytes.resize(at + entry->byte_size());
    const Dtype dtype = entry->dtype;  // not the structured binding: clang does not capture those
    std::visit([&](const auto& values) { encode_floats(dtype, values, bytes.data() + at); }, entry->view);
  }
  return bytes;
}

std::string Writer::write_file(const std::filesystem::path& path) const {
  const std::string header = padded_header();
  std::byte length_field[kHeaderLengthBytes];
  store_le_u64(header.size(), length_field);

  AtomicFileWriter file(path);
  Sha256 hash;
  const auto put = [&](const void* data, std::size_t n) {
    file.write(data, n);
    hash.update(data, n);
  };
  put(length_field, sizeof length_field);
  put(header.data(), header.size());
  std::vector<std::byte> piece;
  for (const auto& [name, entry] : data_order()) {
    if (entry->view_size() == 0) {
      put(entry->bytes.data(), entry->bytes.size());
      continue;
    }
    const Dtype dtype = entry->dtype;  // not the structured binding: clang does not capture those
    const std::size_t size = dtype_size(dtype);
    std::visit(
        [&](const auto& view) {
          for (std::size_t first = 0; first < view.size(); first += kViewPieceValues) {
            const auto values = view.subspan(first, std::min(kViewPieceValues, view.size() - first));
            piece.resize(values.size() * size);
            encode_floats(dtype, values, piece.data());
            put(piece.data(), piece.size());
          }
        },
        entry->view);
  }
  file.commit();
  return hash.hex();
}

}  // namespace dflash::safetensors
