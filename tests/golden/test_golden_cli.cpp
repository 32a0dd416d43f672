// `dflash golden generate|check` and `dflash verify --group golden` as a user runs them: the
// built binary ($DFLASH_BIN, else the build's), exit codes, the table, and bad input named on stderr.

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "golden/training.hpp"
#include "tests/golden/golden_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using golden_testing::generated_bytes;
using golden_testing::RawFile;
using golden_testing::ScratchDirectory;
using ::testing::HasSubstr;

using testing_support::CliRun;

using testing_support::run_dflash;

TEST(GoldenCli, CheckPassesOnTheCommittedGoldens) {
  const CliRun r = run_dflash("golden check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const GoldenCase& c : golden_cases()) EXPECT_THAT(r.out, HasSubstr(golden_file_name(c.name)));
  EXPECT_THAT(r.out, HasSubstr("implementation reference"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("tensors in 6 files: [0-9]+ PASS, 0 FAIL"));
}

TEST(GoldenCli, CheckPassesWithTheLossHeadImplementation) {
  const CliRun r = run_dflash("golden check --impl reference-loss-head");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("42 tensors in 6 files: 42 PASS, 0 FAIL"));
}

TEST(GoldenCli, GenerateOneCaseWritesTheLibrarysBytes) {
  ScratchDirectory dir;
  const CliRun r = run_dflash("golden generate --case short-context --out '" + (dir / "new").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("short-context.safetensors"));
  EXPECT_EQ(safetensors::testing::read_whole_file(dir / "new" / "short-context.safetensors"),
            generated_bytes("short-context"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "new"), std::filesystem::directory_iterator()), 1);
}

TEST(GoldenCli, GenerateAllThenCheckThem) {
  ScratchDirectory dir;
  const CliRun gen = run_dflash("golden generate --out '" + dir.path().string() + "'");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  for (const GoldenCase& c : golden_cases()) EXPECT_TRUE(std::filesystem::exists(dir / golden_file_name(c.name)));
  const CliRun check = run_dflash("golden check --dir '" + dir.path().string() + "'");
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST(GoldenCli, CheckFailsWithExitCodeOneNamingTheTamperedTensor) {
  ScratchDirectory dir;
  RawFile raw = RawFile::of(generated_bytes("dropout"));
  raw.set_float("grad/norm.weight", 0, raw.float_at("grad/norm.weight", 0) * (1 + 1e-6));
  golden_testing::write_raw(dir, "dropout.safetensors", raw);
  const CliRun r = run_dflash("golden check --dir '" + dir.path().string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("dropout.safetensors +grad/norm.weight +[0-9.e-]+ +1e-12 +FAIL"));
  EXPECT_THAT(r.out, HasSubstr(" PASS, 1 FAIL"));
}

TEST(GoldenCli, CheckOfAnUnreadableGoldenFailsNamingIt) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "broken.safetensors", std::string_view("not a golden"));
  const CliRun r = run_dflash("golden check --dir '" + dir.path().string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr((dir / "broken.safetensors").string()));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("broken.safetensors[^\n]*FAIL"));
}

// The same for the training golden: an unreadable file beside a good one fails the run (exit 1),
// named on stderr, with its FAIL row in the table.
TEST(GoldenCli, CheckTrainingOfAnUnreadableGoldenFailsNamingIt) {
  ScratchDirectory dir;
  std::filesystem::copy_file(default_training_golden_dir() / "tiny-3-steps.safetensors",
                             dir / "tiny-3-steps.safetensors");
  safetensors::testing::write_whole_file(dir / "broken.safetensors", std::string_view("not a golden"));
  const CliRun r = run_dflash("golden check-training --dir '" + dir.path().string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr((dir / "broken.safetensors").string()));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("broken.safetensors[^\n]*FAIL"));
}

TEST(GoldenCli, CheckOfAMissingDirectoryIsAnError) {
  ScratchDirectory dir;
  const CliRun r = run_dflash("golden check --dir '" + (dir / "absent").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("invalid golden directory: '" + (dir / "absent").string() + "' does not exist"));
}

TEST(GoldenCli, UnknownCaseIsAnError) {
  ScratchDirectory dir;
  const CliRun r = run_dflash("golden generate --case huge --out '" + dir.path().string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("invalid golden case: 'huge' is not one of: tiny-full"));
}

TEST(GoldenCli, UnknownImplementationIsRejectedByTheFlag) {
  const CliRun r = run_dflash("golden check --impl magic");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--impl"));
}

TEST(GoldenCli, GenerateNeedsAnOutputDirectory) {
  const CliRun r = run_dflash("golden generate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--out"));
}

TEST(GoldenCli, VerifyHasOnePassingRowPerGoldenCase) {
  const CliRun r = run_dflash("verify --group golden");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const GoldenCase& c : golden_cases()) {
    EXPECT_THAT(r.out,
                ::testing::ContainsRegex("golden +" + c.name + " +reference vs committed +[0-9.e+-]+ +1e-12 .*PASS"));
  }
  EXPECT_THAT(r.out, HasSubstr("6 rows: 6 PASS, 0 FAIL"));
}

}  // namespace
}  // namespace dflash
