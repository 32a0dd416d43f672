// matrix_product (the double path of reference/linalg.hpp) returns exactly the bits of the plain
// loops, for every instruction set this CPU runs, every thread count, edge tiles, K split into
// several blocks, strided operands, and accumulation into existing values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "io/errors.hpp"
#include "reference/linalg.hpp"
#include "reference/threads.hpp"
#include "tests/reference/thread_count.hpp"

namespace dflash {
namespace {

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(gen);
  return v;
}

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The three products the reference uses, through matrix_product with a given instruction set,
// against linalg_plain on the same inputs.
void expect_products_match_plain(ProductIsa isa, std::int64_t m, std::int64_t n, std::int64_t k) {
  const auto a = random_values(static_cast<std::size_t>(m * k), 1);
  const auto b = random_values(static_cast<std::size_t>(n * k), 2);
  const auto c0 = random_values(static_cast<std::size_t>(m * n), 3);
  const auto where = testing::Message() << product_isa_name(isa) << " m " << m << " n " << n << " k " << k;

  std::vector<double> plain(m * n), fast(m * n, 7.0);  // 7: a product must overwrite, not add
  linalg_plain::matmul_abt(a.data(), b.data(), plain.data(), m, n, k);
  matrix_product(isa, {a.data(), k, 1}, {b.data(), 1, k}, fast.data(), n, m, n, k, false);
  EXPECT_TRUE(bitwise_equal(plain, fast)) << "A B^T, " << where;

  plain = c0;
  fast = c0;
  linalg_plain::matmul_ab_accumulate(a.data(), b.data(), plain.data(), m, n, k);
  matrix_product(isa, {a.data(), k, 1}, {b.data(), n, 1}, fast.data(), n, m, n, k, true);
  EXPECT_TRUE(bitwise_equal(plain, fast)) << "C + A B, " << where;

  plain = c0;
  fast = c0;
  linalg_plain::matmul_atb_accumulate(a.data(), b.data(), plain.data(), m, n, k);
  matrix_product(isa, {a.data(), 1, m}, {b.data(), n, 1}, fast.data(), n, m, n, k, true);
  EXPECT_TRUE(bitwise_equal(plain, fast)) << "C + A^T B, " << where;
}

TEST(MatrixProduct, EveryInstructionSetEqualsThePlainLoopsBitwise) {
  // Edge tiles in both directions (1, 5, 13, 100 rows: past one MC block of 96; 7, 25, 1100
  // columns: past one NC block of 1056), K of 0, 1, one block, and several blocks of KC = 256.
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes{
      {1, 1, 1}, {5, 7, 0}, {13, 25, 3}, {8, 32, 256}, {17, 1100, 37}, {100, 30, 1030}, {3, 50, 600}};
  for (ProductIsa isa : product_isas_this_cpu_runs()) {
    for (const auto& [m, n, k] : shapes) expect_products_match_plain(isa, m, n, k);
  }
}

TEST(MatrixProduct, IsTheSameForOneTwoAndThreeThreads) {
  // Large enough to be split (by columns for the first product, by rows for the last).
  for (int threads : {1, 2, 3}) {
    const ThreadCount count(threads);
    for (ProductIsa isa : product_isas_this_cpu_runs()) expect_products_match_plain(isa, 37, 300, 200);
    for (ProductIsa isa : product_isas_this_cpu_runs()) expect_products_match_plain(isa, 300, 37, 200);
  }
}

TEST(MatrixProduct, ReadsStridedViewsAndWritesOnlyItsBlockOfC) {
  // A 3 x 4 block of a 5 x 9 C, from every other column of A and a transposed view of B.
  const std::int64_t m = 3, n = 4, k = 6, ldc = 9;
  const auto a = random_values(m * 2 * k, 4), b = random_values(n * k, 5);
  std::vector<double> c(5 * ldc, -1.0), expected = c;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t kk = 0; kk < k; ++kk) s += a[i * 2 * k + 2 * kk] * b[j * k + kk];
      expected[i * ldc + j] = s;
    }
  }
  for (ProductIsa isa : product_isas_this_cpu_runs()) {
    std::vector<double> got = c;
    matrix_product(isa, {a.data(), 2 * k, 2}, {b.data(), 1, k}, got.data(), ldc, m, n, k, false);
    EXPECT_TRUE(bitwise_equal(got, expected)) << product_isa_name(isa);
  }
}

TEST(MatrixProduct, DotRowsAndAddScaledEqualThePlainLoopsBitwise) {
  // 13 strided rows of 37 values (attention: keys of one kv head among others), and an update
  // whose length is not a multiple of any vector width.
  const std::int64_t rows = 13, n = 37, stride = 50;
  const auto x = random_values(n, 6), table = random_values(rows * stride, 7);
  std::vector<double> got(rows), expected(rows);
  dot_rows(x.data(), table.data(), stride, rows, n, got.data());
  for (std::int64_t j = 0; j < rows; ++j) expected[j] = dot(x.data(), table.data() + j * stride, n);
  EXPECT_TRUE(bitwise_equal(got, expected));

  std::vector<double> y = random_values(n, 8), y_plain = y;
  add_scaled(n, 0.3, x.data(), y.data());
  for (std::int64_t c = 0; c < n; ++c) y_plain[c] += 0.3 * x[c];
  EXPECT_TRUE(bitwise_equal(y, y_plain));
}

TEST(ReferenceThreads, RejectsAThreadCountBelowOne) {
  const ThreadCount count(1);
  EXPECT_THROW(set_reference_threads(0), InputError);
  EXPECT_EQ(reference_threads(), 1);
}

TEST(ReferenceThreads, ParsesAWholeNumber) { EXPECT_EQ(parse_thread_count("3"), 3); }

TEST(ReferenceThreads, RejectsZeroInTheEnvironment) {
  EXPECT_THROW(
      try { parse_thread_count("0"); } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("DFLASH_THREADS"), std::string::npos);
        throw;
      },
      InputError);
}

TEST(ReferenceThreads, RejectsANegativeCount) { EXPECT_THROW(parse_thread_count("-2"), InputError); }
TEST(ReferenceThreads, RejectsText) { EXPECT_THROW(parse_thread_count("many"), InputError); }
TEST(ReferenceThreads, RejectsTrailingCharacters) { EXPECT_THROW(parse_thread_count("2x"), InputError); }
TEST(ReferenceThreads, RejectsAnEmptyValue) { EXPECT_THROW(parse_thread_count(""), InputError); }

TEST(ReferenceThreads, RunsEveryPartExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    const ThreadCount count(threads);
    std::vector<int> runs(7, 0);
    run_parts(7, [&](int part) { runs[part] += 1; });
    EXPECT_EQ(runs, std::vector<int>(7, 1)) << threads << " threads";
  }
}

TEST(ReferenceThreads, RowPartsCoverEveryRowOnceInOrder) {
  for (int threads : {1, 2, 3}) {
    const ThreadCount count(threads);
    for (std::int64_t rows : {0, 1, 2, 7, 9}) {
      const std::int64_t parts = row_parts(rows);
      EXPECT_EQ(parts, std::max<std::int64_t>(1, std::min<std::int64_t>(threads, rows)));
      std::vector<std::int64_t> owner(static_cast<std::size_t>(rows), -1), begins(static_cast<std::size_t>(parts), -1);
      std::vector<int> runs(static_cast<std::size_t>(parts), 0);
      run_row_parts(rows, parts, [&](std::int64_t part, std::int64_t begin, std::int64_t end) {
        runs[static_cast<std::size_t>(part)] += 1;
        begins[static_cast<std::size_t>(part)] = begin;
        for (std::int64_t r = begin; r < end; ++r) owner[static_cast<std::size_t>(r)] = part;
      });
      EXPECT_EQ(runs, std::vector<int>(static_cast<std::size_t>(parts), 1)) << rows << " rows";
      EXPECT_TRUE(std::is_sorted(owner.begin(), owner.end())) << rows << " rows";  // contiguous, in part order
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << rows << " rows";
    }
  }
}

TEST(ReferenceThreads, RejectsZeroRowParts) {
  EXPECT_THROW(run_row_parts(4, 0, [](std::int64_t, std::int64_t, std::int64_t) {}), InputError);
}

}  // namespace
}  // namespace dflash
