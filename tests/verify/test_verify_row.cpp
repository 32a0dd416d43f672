// The kinds of verify rows: what each one passes, fails or skips, and how the table counts them.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "verify/row.hpp"

namespace dflash {
namespace {

RowName name(const char* variant) { return {.group = "g", .case_name = "c", .variant = variant}; }

TEST(VerifyRow, ToleranceRowPassesUpToItsBoundInclusive) {
  EXPECT_TRUE(tolerance_row(name("at"), {.error = 1e-12, .tolerance = 1e-12}).passed());
  EXPECT_FALSE(tolerance_row(name("over"), {.error = 1.01e-12, .tolerance = 1e-12}).passed());
  EXPECT_FALSE(tolerance_row(name("nan"), {.error = std::nan(""), .tolerance = 1e-12}).passed());
}

TEST(VerifyRow, ToleranceRowKeepsEveryNamedField) {
  const VerifyRow r = tolerance_row({.group = "loss_head", .case_name = "T5", .variant = "materialize"},
                                    {.error = 2e-13, .tolerance = 1e-12, .peak_bytes = 640, .note = "vs oracle"});
  EXPECT_EQ(r.group, "loss_head");
  EXPECT_EQ(r.case_name, "T5");
  EXPECT_EQ(r.variant, "materialize");
  EXPECT_EQ(r.error, 2e-13);
  EXPECT_EQ(r.tolerance, 1e-12);
  EXPECT_EQ(r.peak_bytes, 640u);
  EXPECT_EQ(r.note, "vs oracle");
  EXPECT_FALSE(r.skipped);
}

TEST(VerifyRow, ExactRowPassesOnlyWithoutMismatch) {
  EXPECT_TRUE(exact_row(name("same"), {.mismatch = 0, .peak_bytes = 8}).passed());
  EXPECT_FALSE(exact_row(name("one ulp"), {.mismatch = 1e-300}).passed());
  EXPECT_EQ(exact_row(name("peak"), {.mismatch = 0, .peak_bytes = 96}).peak_bytes, 96u);
}

TEST(VerifyRow, SkippedRowNeitherPassesNorFails) {
  const VerifyRow r = skipped_row(name("gpu"), "no GPU: none here");
  EXPECT_TRUE(r.skipped);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.note, "no GPU: none here");
}

TEST(VerifyRow, ThrownRowFailsAndSaysWhatItThrew) {
  const VerifyRow r = threw_row(name("boom"), "bad shape");
  EXPECT_FALSE(r.skipped);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.note, "threw: bad shape");
}

TEST(VerifyTable, CountsFailuresButNotSkips) {
  std::ostringstream out;
  const int failed = print_verify_table(
      out, {tolerance_row(name("a"), {.error = 0, .tolerance = 1e-12}), exact_row(name("b"), {.mismatch = 1}),
            skipped_row(name("c"), "why"), threw_row(name("d"), "what")});
  EXPECT_EQ(failed, 2);
  EXPECT_NE(out.str().find("4 rows: 1 PASS, 2 FAIL, 1 SKIPPED"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace dflash
