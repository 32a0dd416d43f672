#include "reference/threads.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string>

#include <omp.h>

#include "io/errors.hpp"

namespace dflash {
namespace {

std::atomic<int>& thread_setting() {
  static std::atomic<int> threads = [] {
    const char* text = std::getenv("DFLASH_THREADS");
    return text == nullptr ? 1 : parse_thread_count(text);
  }();
  return threads;
}

}  // namespace

int parse_thread_count(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) {
    throw_input_error("DFLASH_THREADS", str("'", text, "' is not a whole number >= 1"));
  }
  return value;
}

int reference_threads() { return thread_setting().load(); }

void set_reference_threads(int threads) {
  if (threads < 1) throw_input_error("threads", str(threads, " must be >= 1"));
  thread_setting().store(threads);
}

void run_parts(int parts, const std::function<void(int part)>& work) {
  const int threads = omp_in_parallel() ? 1 : std::min(parts, reference_threads());
  if (threads <= 1) {
    for (int p = 0; p < parts; ++p) work(p);
    return;
  }
  // Parts are dealt out round-robin: a fixed map from part to thread, though nothing depends on it.
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    for (int p = t; p < parts; p += n) work(p);
  }
}

std::int64_t row_parts(std::int64_t rows) {
  return omp_in_parallel() ? 1 : std::max<std::int64_t>(1, std::min<std::int64_t>(reference_threads(), rows));
}

void run_row_parts(std::int64_t rows, std::int64_t parts,
                   const std::function<void(std::int64_t part, std::int64_t begin, std::int64_t end)>& work) {
  if (parts < 1) throw_input_error("parts", str(parts, " must be >= 1"));
  const std::int64_t per_part = (std::max<std::int64_t>(rows, 0) + parts - 1) / parts;
  run_parts(static_cast<int>(parts), [&](int part) {
    const std::int64_t begin = std::min(rows, part * per_part), end = std::min(rows, begin + per_part);
    work(part, begin, end);
  });
}

void run_row_ranges(std::int64_t rows, const std::function<void(std::int64_t begin, std::int64_t end)>& work) {
  if (rows <= 0) return;
  run_row_parts(rows, row_parts(rows), [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    if (begin < end) work(begin, end);
  });
}

}  // namespace dflash
