// The CUDA benchmarks' JSON (bench/cuda/bench_json.hpp): what std::ostream writes for non-finite
// doubles becomes what Python's json.load reads, outside strings only; finite numbers and strings
// are untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "bench/cuda/bench_json.hpp"

namespace dflash {
namespace {

TEST(BenchJson, NonFiniteNumbersAsPythonReadsThem) {
  std::ostringstream out;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  out << "{\"loss\": " << nan << ", \"negative\": " << -nan << ", \"ratio\": " << inf << ", \"low\": " << -inf
      << ", \"list\": [" << inf << ", 1.5, " << nan << "], \"ok\": -2.5e-07}";
  EXPECT_EQ(python_json_numbers(out.str()),
            "{\"loss\": NaN, \"negative\": NaN, \"ratio\": Infinity, \"low\": -Infinity, "
            "\"list\": [Infinity, 1.5, NaN], \"ok\": -2.5e-07}");
}

TEST(BenchJson, StringsAreLeftAsTheyAre) {
  const std::string text =
      "{\"device\": \"infinite nan card \\\"inf\\\"\", \"policy\": \"chunk_recompute\", \"x\": inf}";
  EXPECT_EQ(python_json_numbers(text),
            "{\"device\": \"infinite nan card \\\"inf\\\"\", \"policy\": \"chunk_recompute\", \"x\": Infinity}");
}

}  // namespace
}  // namespace dflash
