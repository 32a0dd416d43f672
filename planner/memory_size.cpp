#include "planner/memory_size.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <utility>

#include "io/errors.hpp"

namespace dflash {
namespace {

constexpr std::int64_t kKilo = 1000, kKibi = 1024;
constexpr std::array<std::pair<std::string_view, std::int64_t>, 9> kUnits = {{
    {"b", 1},
    {"kb", kKilo},
    {"mb", kKilo* kKilo},
    {"gb", kKilo* kKilo* kKilo},
    {"tb", kKilo* kKilo* kKilo* kKilo},
    {"kib", kKibi},
    {"mib", kKibi* kKibi},
    {"gib", kKibi* kKibi* kKibi},
    {"tib", kKibi* kKibi* kKibi* kKibi},
}};

[[noreturn]] void not_a_size(std::string_view text, std::string_view argument) {
  throw_input_error(argument,
                    str("'", text, "' is not a size (expected bytes or a number with KB/MB/GB/TB/KiB/MiB/GiB/TiB)"));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::int64_t parse_memory_size(std::string_view text, std::string_view argument) {
  // number := digits [ '.' digits ], then optional spaces, then an optional unit.
  std::size_t i = 0;
  std::int64_t whole = 0, fraction = 0, fraction_scale = 1;
  auto overflow = [&] { throw_input_error(argument, str("'", text, "' is larger than 2^63 - 1 bytes")); };
  const std::size_t digits_start = i;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (__builtin_mul_overflow(whole, 10, &whole) || __builtin_add_overflow(whole, text[i] - '0', &whole)) overflow();
  }
  if (i == digits_start) {
    if (!text.empty() && text[0] == '-')
      throw_input_error(argument, str("'", text, "' is negative; a size must be positive"));
    not_a_size(text, argument);
  }
  if (i < text.size() && text[i] == '.') {
    const std::size_t fraction_start = ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (fraction_scale >= kKilo * kKilo * kKilo * kKilo * kKilo) not_a_size(text, argument);  // absurd precision
      fraction = fraction * 10 + (text[i] - '0');
      fraction_scale *= 10;
    }
    if (i == fraction_start) not_a_size(text, argument);
  }
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit_text = lower(text.substr(i));
  std::int64_t unit = 0;
  if (unit_text.empty()) unit = 1;
  for (const auto& [name, value] : kUnits) {
    if (unit_text == name) unit = value;
  }
  if (unit == 0) not_a_size(text, argument);

  std::int64_t bytes = 0, fraction_bytes = 0;
  if (__builtin_mul_overflow(whole, unit, &bytes)) overflow();
  // fraction/scale of a unit must be a whole number of bytes ("1.5KiB" is 1536 B, "0.3B" is not).
  if (__builtin_mul_overflow(fraction, unit, &fraction_bytes)) overflow();
  if (fraction_bytes % fraction_scale != 0) {
    throw_input_error(argument, str("'", text, "' is not a whole number of bytes"));
  }
  if (__builtin_add_overflow(bytes, fraction_bytes / fraction_scale, &bytes)) overflow();
  if (bytes <= 0) throw_input_error(argument, str("'", text, "' is zero; a size must be positive"));
  return bytes;
}

double to_gib(std::int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kKibi * kKibi * kKibi); }

std::string gib_string(std::int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", to_gib(bytes));
  return buffer;
}

std::string gb_string(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GB", double(bytes) / 1e9);
  return buffer;
}

}  // namespace dflash
