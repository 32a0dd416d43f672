// Writing safetensors files, deterministically: the same tensors and metadata always give the
// same bytes, whatever order they were added in.
//
// Layout choices (all allowed by the format, all the same as the reference implementation behind
// the Python package, so the bytes match it too, metadata key order aside: we sort the keys, it
// leaves them in hash-map order): "__metadata__" first in the header (omitted when
// empty), then the tensors in data order; the header padded with spaces to a multiple of 8 bytes;
// tensors packed back to back, grouped by dtype in the order I64, F64, F32, I32, BF16, F16, U8,
// BOOL (decreasing element size) and by name within a dtype. With the data section starting at a
// multiple of 8, every tensor then sits at an offset that is a multiple of its element size, so a
// reader can view the bytes in place (torch refuses misaligned views).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "io/safetensors_header.hpp"
#include "io/safetensors_tensor.hpp"

namespace dflash::safetensors {

// A tensor as a file lays it out: its name, dtype and shape, without its values.
struct TensorSpec {
  std::string name;
  Dtype dtype;
  Shape shape;
};

// The size in bytes of the file a Writer holding tensors of exactly these names, dtypes and shapes,
// and this metadata, writes (write_file, to_bytes): a file planned before its values exist (a
// checkpoint's, against the disk's free space). The header is the Writer's own. Throws InputError
// on what add_* refuses: a repeated or reserved name, a shape that overflows.
std::uint64_t file_size(std::span<const TensorSpec> tensors, const Metadata& metadata = {});

class Writer {
 public:
  // Every add_* and set_metadata checks its input and throws dflash::InputError naming the tensor
  // (or key) and the problem: a repeated or reserved name, invalid UTF-8, a dtype of the wrong
  // kind, a value count that does not match the shape, an integer out of the dtype's range.

  // `values` rounded to `dtype` (F64, F32, BF16 or F16), round to nearest, ties to even.
  void add_floats(const std::string& name, Dtype dtype, const Shape& shape, std::span<const double> values);
  // The same bytes, but `values` are read and rounded when the file is written (write_file,
  // to_bytes), a piece at a time, not copied now: they must outlive those calls. For tensors the
  // size of the data (a checkpoint's flat vectors): the file then costs no second copy in memory.
  void add_floats_view(const std::string& name, Dtype dtype, const Shape& shape, std::span<const double> values);
  // The same from fp32 values (a device backend's master weights and moments, gathered as they are
  // held: half the bytes of doubles); each float is exactly a double, so the bytes are those of
  // add_floats on the same values.
  void add_floats_view(const std::string& name, Dtype dtype, const Shape& shape, std::span<const float> values);
  // `values` stored as `dtype` (I64, I32, U8 or BOOL), each checked to fit.
  void add_integers(const std::string& name, Dtype dtype, const Shape& shape, std::span<const std::int64_t> values);
  // Bytes already encoded as little-endian `dtype` elements in C order.
  void add_bytes(const std::string& name, Dtype dtype, const Shape& shape, std::span<const std::byte> bytes);

  // Metadata entry; setting a key again replaces its value.
  void set_metadata(const std::string& key, const std::string& value);

  // The whole file.
  std::vector<std::byte> to_bytes() const;

  // Writes the file through io/file_write.hpp (an exclusively created temporary beside it, flushed
  // to disk, renamed over `path`): an existing file at `path` is replaced whole or left untouched,
  // never half-written. Throws std::runtime_error naming the path if anything fails (the
  // temporary file is removed). Returns the SHA-256 of the bytes written (lowercase hex, as
  // sha256_file_hex gives for the file), hashed as they are written: a checkpoint records it without
  // reading its files back (20.8 GB at full scale: about 3 s from the page cache at the 6.4 GB/s
  // measured here, more from disk once evicted; the hashing itself, ~12 s, is still done).
  std::string write_file(const std::filesystem::path& path) const;

 private:
  // The values an add_floats_view tensor encodes when written.
  using FloatView = std::variant<std::span<const double>, std::span<const float>>;
  struct Entry {
    Dtype dtype;
    Shape shape;
    std::vector<std::byte> bytes;   // the encoded elements, or
    FloatView view;                 // the values to encode when written (add_floats_view)
    std::size_t byte_size() const;  // in the file
    std::size_t view_size() const;  // values in view (0: the tensor is in bytes)
  };
  void add_view(const std::string& name, Dtype dtype, const Shape& shape, FloatView values);

  // The header JSON text padded with spaces to a multiple of 8 bytes, and the tensors in data
  // order.
  std::string padded_header() const;
  std::vector<std::pair<const std::string*, const Entry*>> data_order() const;
  // Checks name and shape against the value count, returns the byte count the tensor needs.
  std::size_t checked_new_tensor(const std::string& name, Dtype dtype, const Shape& shape, std::size_t count) const;

  std::map<std::string, Entry> tensors_;
  Metadata metadata_;
};

}  // namespace dflash::safetensors
