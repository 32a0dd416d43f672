#include "distributed/data/feature_shard.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"

namespace dflash {

using safetensors::Dtype;

FeatureSetShape FeatureSetShape::of(const DrafterConfig& config) {
  return FeatureSetShape{config.hidden_size, config.target_layer_ids, config.vocab_size};
}

namespace {

// "invalid <file>: <what>: <problem>"
[[noreturn]] void shard_error(std::string_view file, std::string_view what, const std::string& problem) {
  throw_input_error(file, str(what, ": ", problem));
}

std::string metadata_value(const safetensors::Layout& layout, std::string_view file, const std::string& key) {
  const auto it = layout.metadata.find(key);
  if (it == layout.metadata.end()) shard_error(file, str("__metadata__.", key), "missing");
  return it->second;
}

// A metadata value that must be a non-negative decimal integer.
std::int64_t metadata_integer(const safetensors::Layout& layout, std::string_view file, const std::string& key) {
  const std::string text = metadata_value(layout, file, key);
  nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_number_unsigned())
    shard_error(file, str("__metadata__.", key), str("'", text, "' is not a non-negative integer"));
  // Read unsigned: a value above 2^63 - 1 read as int64_t would wrap to a negative size.
  const auto value = v.get<std::uint64_t>();
  if (value > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
    shard_error(file, str("__metadata__.", key), str("'", text, "' is above 2^63 - 1"));
  }
  return std::int64_t(value);
}

// __metadata__.target_layer_ids: a non-empty JSON list of integers. Text that is not JSON is refused
// here: a failed parse compared with `!=` is false both ways, and would pass for any list.
std::vector<std::int64_t> metadata_layer_ids(const safetensors::Layout& layout, std::string_view file) {
  const std::string text = metadata_value(layout, file, "target_layer_ids");
  const nlohmann::json ids = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ids.is_discarded() || !ids.is_array() || ids.empty()) {
    shard_error(file, "__metadata__.target_layer_ids", str("'", text, "' is not a JSON list of integers (non-empty)"));
  }
  std::vector<std::int64_t> out;
  for (const nlohmann::json& id : ids) {
    if (!id.is_number_integer() ||
        (id.is_number_unsigned() &&
         id.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))) {
      shard_error(file, "__metadata__.target_layer_ids",
                  str("'", text, "' is not a JSON list of integers (non-empty)"));
    }
    out.push_back(id.get<std::int64_t>());
  }
  return out;
}

const safetensors::TensorInfo& required_tensor(const safetensors::Layout& layout, std::string_view file,
                                               std::string_view name, std::initializer_list<Dtype> dtypes,
                                               const safetensors::Shape& shape) {
  const auto it = layout.tensors.find(name);
  if (it == layout.tensors.end()) shard_error(file, str("tensor '", name, "'"), "missing");
  const safetensors::TensorInfo& t = it->second;
  bool allowed = false;
  std::string names;
  for (Dtype d : dtypes) {
    allowed = allowed || d == t.dtype;
    names += (names.empty() ? "" : " or ") + std::string(safetensors::dtype_name(d));
  }
  if (!allowed)
    shard_error(file, str("tensor '", name, "'"), str("dtype ", safetensors::dtype_name(t.dtype), " is not ", names));
  if (t.shape != shape) {
    shard_error(file, str("tensor '", name, "'"),
                str("shape ", safetensors::format_shape(t.shape), " is not ", safetensors::format_shape(shape)));
  }
  return t;
}

}  // namespace

FeatureSetShape FeatureSetShape::declared_by(const std::filesystem::path& shard) {
  const safetensors::Reader r = safetensors::Reader::open_file(shard);
  const std::string file = shard.string();
  FeatureSetShape shape;
  shape.hidden_size = metadata_integer(r.layout(), file, "hidden_size");
  shape.target_layer_ids = metadata_layer_ids(r.layout(), file);
  // Every row holds K H features: a declared width that does not fit 64 bits is refused here, before
  // feature_width() multiplies it (signed overflow) and a reader sizes a buffer by it.
  const auto K = std::int64_t(shape.target_layer_ids.size());
  if (shape.hidden_size > std::numeric_limits<std::int64_t>::max() / K) {
    shard_error(file, "__metadata__.hidden_size",
                str("'", shape.hidden_size, "' times ", K, " target layers does not fit a 64-bit feature width"));
  }
  shape.vocab_size = std::numeric_limits<std::int64_t>::max();
  return shape;
}

FeatureShard FeatureShard::open(const std::filesystem::path& path, const FeatureSetShape& shape,
                                bool read_every_value) {
  FeatureShard s;
  s.source_ = path.string();
  const std::string& file = s.source_;
  s.file_ = MappedFile::open(path);
  const std::span<const std::byte> bytes = s.file_.bytes();
  // Every read of the map here is a guarded copy into memory that already exists: a shard cut
  // (truncated, rewritten) while it is validated ends as an InputError naming it, never SIGBUS.
  std::array<std::byte, 8> length_bytes{};
  const std::size_t length_size = std::min<std::size_t>(bytes.size(), length_bytes.size());
  if (length_size > 0) s.file_.copy_guarded([&] { std::memcpy(length_bytes.data(), bytes.data(), length_size); });
  const std::uint64_t header_length =
      safetensors::checked_header_length(file, std::span(length_bytes).first(length_size), bytes.size());
  std::string header_text(header_length, '\0');
  s.file_.copy_guarded([&] { std::memcpy(header_text.data(), bytes.data() + 8, header_length); });
  const safetensors::Layout layout = safetensors::parse_layout(file, header_text, bytes.size());

  // Metadata: format, version, and the shape the config expects.
  const std::string format = metadata_value(layout, file, "format");
  if (format != kFeatureShardFormat) {
    shard_error(file, "__metadata__.format", str("'", format, "' is not '", kFeatureShardFormat, "'"));
  }
  const std::string version = metadata_value(layout, file, "version");
  if (version != kFeatureShardVersion) {
    shard_error(file, "__metadata__.version", str("'", version, "' is not '", kFeatureShardVersion, "'"));
  }
  const std::int64_t H = metadata_integer(layout, file, "hidden_size");
  if (H != shape.hidden_size) {
    shard_error(file, "__metadata__.hidden_size",
                str(H, " does not match the config's hidden_size = ", shape.hidden_size));
  }
  if (metadata_layer_ids(layout, file) != shape.target_layer_ids) {
    shard_error(file, "__metadata__.target_layer_ids",
                str(metadata_value(layout, file, "target_layer_ids"), " does not match the config's ",
                    nlohmann::json(shape.target_layer_ids).dump()));
  }
  const std::int64_t n = metadata_integer(layout, file, "num_sequences");
  if (const auto it = layout.metadata.find("target_model"); it != layout.metadata.end()) s.target_model_ = it->second;

  // Offsets first: they give the row count every other tensor is checked against.
  const auto& offsets = required_tensor(layout, file, "offsets", {Dtype::I64}, {n + 1});
  const std::byte* base = bytes.data() + layout.data_start;
  s.offsets_.resize(std::size_t(n + 1));
  s.file_.copy_guarded([&] {
    for (std::int64_t i = 0; i <= n; ++i) {
      s.offsets_[std::size_t(i)] = safetensors::load_integer_element(Dtype::I64, base + offsets.begin + 8 * i);
    }
  });
  if (s.offsets_[0] != 0) shard_error(file, "tensor 'offsets'[0]", str(s.offsets_[0], " is not 0"));
  for (std::int64_t i = 1; i <= n; ++i) {
    if (s.offsets_[std::size_t(i)] <= s.offsets_[std::size_t(i) - 1]) {
      shard_error(file, str("tensor 'offsets'[", i, "]"),
                  str(s.offsets_[std::size_t(i)], " is not greater than offsets[", i - 1,
                      "] = ", s.offsets_[std::size_t(i) - 1], " (every sequence has at least one row)"));
    }
  }
  const std::int64_t rows = s.offsets_.back(), KH = shape.feature_width();
  const auto& tokens = required_tensor(layout, file, "tokens", {Dtype::I32, Dtype::I64}, {rows});
  const auto& mask = required_tensor(layout, file, "loss_mask", {Dtype::U8, Dtype::BOOL}, {rows});
  const auto& features =
      required_tensor(layout, file, "target_features", {Dtype::BF16, Dtype::F16, Dtype::F32}, {rows, KH});
  const auto& teacher =
      required_tensor(layout, file, "teacher_hidden", {Dtype::BF16, Dtype::F16, Dtype::F32}, {rows, H});
  s.tokens_ = {tokens.dtype, base + tokens.begin, 1};
  s.loss_mask_ = {mask.dtype, base + mask.begin, 1};
  s.features_ = {features.dtype, base + features.begin, KH};
  s.teacher_ = {teacher.dtype, base + teacher.begin, H};
  if (read_every_value) s.check_every_value(shape);
  return s;
}

void FeatureShard::check_every_value(const FeatureSetShape& shape) const {
  // The scan reads the map under copy_guarded, so it only records the first value that breaks a
  // rule (plain values, nothing allocated: a fault may leave the scan with a jump); the error is
  // built after it.
  struct Problem {
    const char* tensor = nullptr;  // null: none
    std::int64_t row = 0, col = -1, integer = 0;
    double value = 0.0;
  } problem;
  const std::int64_t rows = num_rows();
  std::vector<double> row(std::size_t(std::max(features_.width, teacher_.width)));
  file_.copy_guarded([&] {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t t = token(r);
      if (t < 0 || t >= shape.vocab_size) {
        problem = {.tensor = "tokens", .row = r, .integer = t};
        return;
      }
      const std::int64_t m = safetensors::load_integer_element(loss_mask_.dtype, loss_mask_.data + r);
      if (m != 0 && m != 1) {
        problem = {.tensor = "loss_mask", .row = r, .integer = m};
        return;
      }
    }
    for (const auto& [name, view] : {std::pair<const char*, const View*>{"target_features", &features_},
                                     std::pair<const char*, const View*>{"teacher_hidden", &teacher_}}) {
      for (std::int64_t r = 0; r < rows; ++r) {
        load_rows(*view, r, 1, row.data());
        bool finite = true;  // over the whole row first: a loop without an exit, which vectorises
        for (std::int64_t c = 0; c < view->width; ++c) finite &= std::isfinite(row[std::size_t(c)]);
        if (finite) continue;
        for (std::int64_t c = 0; c < view->width; ++c) {
          if (!std::isfinite(row[std::size_t(c)])) {
            problem = {.tensor = name, .row = r, .col = c, .value = row[std::size_t(c)]};
            return;
          }
        }
      }
    }
  });
  if (problem.tensor == nullptr) return;
  const std::string_view tensor = problem.tensor;
  if (tensor == "tokens") {
    shard_error(source_, str("tensor 'tokens'[", problem.row, "]"),
                str(problem.integer, " is outside [0, vocab_size = ", shape.vocab_size, ")"));
  }
  if (tensor == "loss_mask") {
    shard_error(source_, str("tensor 'loss_mask'[", problem.row, "]"), str(problem.integer, " is not 0 or 1"));
  }
  shard_error(source_, str("tensor '", tensor, "'[", problem.row, "][", problem.col, "]"),
              str(problem.value, " is not finite (every row of a shard must be)"));
}

std::int64_t FeatureShard::token(std::int64_t row) const {
  return safetensors::load_integer_element(tokens_.dtype,
                                           tokens_.data + row * std::int64_t(safetensors::dtype_size(tokens_.dtype)));
}

std::uint8_t FeatureShard::loss_mask(std::int64_t row) const {
  return static_cast<std::uint8_t>(safetensors::load_integer_element(loss_mask_.dtype, loss_mask_.data + row));
}

void FeatureShard::load_rows(const View& v, std::int64_t first, std::int64_t count, double* out) {
  const auto size = std::int64_t(safetensors::dtype_size(v.dtype));
  safetensors::load_float_elements(v.dtype, v.data + first * v.width * size, std::size_t(count * v.width), out);
}

void FeatureShard::load_rows(const View& v, std::int64_t first, std::int64_t count, Bf16Bits* out) {
  const auto size = std::int64_t(safetensors::dtype_size(v.dtype));
  const std::byte* in = v.data + first * v.width * size;
  const std::int64_t n = count * v.width;
  if (v.dtype == safetensors::Dtype::BF16 && std::endian::native == std::endian::little) {
    // A BF16 shard's elements are the bits already: widened and rounded back, a finite value gives
    // them again (and a non-finite one is refused after the read either way).
    std::memcpy(out, in, std::size_t(n) * sizeof(Bf16Bits));
    return;
  }
  constexpr std::int64_t kChunk = 1024;
  double chunk[kChunk];
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    const std::int64_t m = std::min(kChunk, n - begin);
    safetensors::load_float_elements(v.dtype, in + begin * size, std::size_t(m), chunk);
    for (std::int64_t e = 0; e < m; ++e) out[begin + e] = bf16_bits_from_float(static_cast<float>(chunk[e]));
  }
}

void FeatureShard::feature_rows(std::int64_t first, std::int64_t count, double* out) const {
  load_rows(features_, first, count, out);
}
void FeatureShard::teacher_rows(std::int64_t first, std::int64_t count, double* out) const {
  load_rows(teacher_, first, count, out);
}
void FeatureShard::feature_rows(std::int64_t first, std::int64_t count, Bf16Bits* out) const {
  load_rows(features_, first, count, out);
}
void FeatureShard::teacher_rows(std::int64_t first, std::int64_t count, Bf16Bits* out) const {
  load_rows(teacher_, first, count, out);
}

}  // namespace dflash
