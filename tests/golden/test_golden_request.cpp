// `dflash golden generate --config` (a golden at the user's config and shape) and
// `dflash golden compare` as a user runs them: the built binary, exit codes, the table, errors.

#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "golden/check.hpp"
#include "golden/compare.hpp"
#include "golden/request.hpp"
#include "tests/golden/golden_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using golden_testing::committed_golden;
using golden_testing::input_error_of;
using golden_testing::ScratchDirectory;
using ::testing::HasSubstr;
using testing_support::CliRun;

using testing_support::run_dflash;

const std::filesystem::path kMidConfig = std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/mid.json";

// The user shape of the tests: the mid config (5 layers, H 256, V 4096, 32 blocks of 16), two
// sequences of a short context, so that one reference step takes seconds here.
constexpr std::int64_t kMidSequences = 2;
constexpr std::int64_t kMidContext = 48;

GoldenRequest mid_request() {
  GoldenRequest r;
  r.config = load_drafter_config(kMidConfig);
  r.case_name = "mid";
  r.sequences = kMidSequences;
  r.context = kMidContext;
  r.seed = 77;
  r.step = 3;
  return r;
}

std::string mid_flags() {
  return str("--config '", kMidConfig.string(), "' --sequences ", kMidSequences, " --context ", kMidContext,
             " --seed 77 --step 3");
}

TEST(GoldenRequest, BadFlagsAreErrorsNamingTheFlag) {
  GoldenRequest r = mid_request();
  r.sequences = 0;
  EXPECT_THAT(input_error_of([&] { golden_request_case(r); }), HasSubstr("invalid --sequences: 0 must be at least 1"));
  r = mid_request();
  r.context = -3;
  EXPECT_THAT(input_error_of([&] { golden_request_case(r); }), HasSubstr("invalid --context: -3"));
  r = mid_request();
  r.attention_dropout = 1.5;
  EXPECT_THAT(input_error_of([&] { golden_request_case(r); }),
              HasSubstr("invalid --attention-dropout: 1.5 must lie in [0, 1)"));
  r = mid_request();
  r.hidden_dropout = -0.1;
  EXPECT_THAT(input_error_of([&] { golden_request_case(r); }), HasSubstr("invalid --hidden-dropout"));
  r = mid_request();
  r.case_name.clear();
  EXPECT_THAT(input_error_of([&] { golden_request_case(r); }), HasSubstr("invalid --case"));
}

TEST(GoldenRequest, TheOverridesReachTheCase) {
  GoldenRequest r = mid_request();
  r.attention_dropout = 0.1;
  r.hidden_dropout = 0.2;
  const GoldenCase c = golden_request_case(r);
  EXPECT_EQ(c.config.seed, 77u);
  EXPECT_EQ(c.config.attention_dropout, 0.1);
  EXPECT_EQ(c.config.hidden_dropout, 0.2);
  EXPECT_EQ(c.batch.sequences, kMidSequences);
  EXPECT_EQ(c.batch.context_length, kMidContext);
  EXPECT_EQ(c.step, 3u);
  r.context = 0;
  EXPECT_EQ(golden_request_case(r).batch.context_length, 16 * 32);  // block_size x max_anchors
}

TEST(GoldenRequest, TheEstimateIsWithinTheBudgetForMidAndOverItAtFullScale) {
  const GoldenCostEstimate mid = estimate_golden_cost(golden_request_case(mid_request()));
  EXPECT_FALSE(over_budget(mid).has_value()) << describe_estimate(mid);
  EXPECT_LT(mid.seconds, 60);
  GoldenRequest full;
  full.config = load_drafter_config(std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/qwen3.6-27b.json");
  full.case_name = "full";
  full.sequences = 1;
  const auto why = over_budget(estimate_golden_cost(golden_request_case(full)));
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("the estimated time"));
  EXPECT_THAT(*why, HasSubstr("the estimated memory"));
}

// Generating at the mid shape: once through the CLI, once through the library. The same bytes
// (deterministic, and the CLI adds nothing), the file reads back as a valid golden with the
// requested shape, the reference recomputes it within 1e-12, and it passes compare against itself.
TEST(GoldenRequest, AMidShapeGoldenRoundTripsIsDeterministicAndPassesTheReferenceCheck) {
  ScratchDirectory dir;
  const CliRun gen =
      run_dflash("golden generate " + mid_flags() + " --out '" + (dir / "mid.safetensors").string() + "'");
  ASSERT_EQ(gen.exit_code, 0) << gen.out << gen.err;
  EXPECT_THAT(gen.out, HasSubstr("golden generate: case mid, 2 sequences x S = 48, N x B = 32 x 16, seed 77, step 3: "
                                 "about"));
  EXPECT_THAT(gen.out, HasSubstr("wrote " + (dir / "mid.safetensors").string()));

  const Golden generated = generate_golden(golden_request_case(mid_request()));
  EXPECT_EQ(safetensors::testing::read_whole_file(dir / "mid.safetensors"), golden_bytes(generated));

  // The estimate's memory is the plan: never below what the step really held (the tracker's
  // peak), and not wildly above; its file size is the file's, headers estimated from above.
  const GoldenCostEstimate estimate = estimate_golden_cost(golden_request_case(mid_request()));
  const auto peak = std::int64_t(generated.tracker->peak_total());
  EXPECT_GE(estimate.step_bytes, peak);
  EXPECT_LT(estimate.step_bytes, 2 * peak);
  const auto file = std::int64_t(std::filesystem::file_size(dir / "mid.safetensors"));
  EXPECT_GE(estimate.file_bytes, file);
  EXPECT_LT(estimate.file_bytes, file + file / 100);

  const Golden g = read_golden(dir / "mid.safetensors");
  EXPECT_EQ(g.case_name, "mid");
  EXPECT_EQ(g.num_sequences(), kMidSequences);
  EXPECT_EQ(g.context_length(), kMidContext);
  EXPECT_EQ(g.step, 3u);
  EXPECT_EQ(g.config.seed, 77u);
  EXPECT_EQ(g.results.at("output/hidden").shape, (Shape{kMidSequences, 512, 256}));
  EXPECT_GT(golden_scalar(g.results, "output/weight_sum"), 0);

  for (const GoldenCheckRow& row : check_golden(g, reference_golden_implementation())) {
    EXPECT_TRUE(row.passed()) << row.tensor << " " << row.error << " " << row.note;
  }
}

// The flags as a user types them reach the golden: --case names it (not the config file's stem),
// each dropout flag sets its own rate (tiny.json has both at 0), and a rate of 0 is a valid value.
TEST(GoldenRequest, TheCliFlagsReachTheGoldenFile) {
  ScratchDirectory dir;
  const auto tiny = std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/tiny.json";
  auto generate = [&](const std::string& flags, const std::string& name) {
    const CliRun gen = run_dflash("golden generate --config '" + tiny.string() + "' " + flags +
                                  " --sequences 1 --context 8 --seed 5 --step 2 --out '" + (dir / name).string() + "'");
    EXPECT_EQ(gen.exit_code, 0) << gen.out << gen.err;
    return read_golden(dir / name);
  };
  const Golden g = generate("--case my-case --attention-dropout 0.1 --hidden-dropout 0.2", "g.safetensors");
  EXPECT_EQ(g.case_name, "my-case");
  EXPECT_EQ(g.config.attention_dropout, 0.1);
  EXPECT_EQ(g.config.hidden_dropout, 0.2);
  EXPECT_EQ(g.config.seed, 5u);
  EXPECT_EQ(g.step, 2u);
  EXPECT_EQ(g.num_sequences(), 1);
  EXPECT_EQ(g.context_length(), 8);
  const Golden off = generate("--attention-dropout 0 --hidden-dropout 0", "off.safetensors");
  EXPECT_EQ(off.case_name, "tiny");  // without --case, the config file's stem
  EXPECT_EQ(off.config.attention_dropout, 0.0);
  EXPECT_EQ(off.config.hidden_dropout, 0.0);
}

TEST(GoldenRequest, GenerateOverTheBudgetIsRefusedNamingIt) {
  ScratchDirectory dir;
  const CliRun r = run_dflash("golden generate --config '" +
                              (std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/qwen3.6-27b.json").string() +
                              "' --sequences 1 --out '" + (dir / "big.safetensors").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("is over the budget of 600 s"));
  EXPECT_THAT(r.err, HasSubstr("--force"));
  EXPECT_FALSE(std::filesystem::exists(dir / "big.safetensors"));
}

TEST(GoldenRequest, UserShapeFlagsNeedAConfig) {
  ScratchDirectory dir;
  const CliRun r = run_dflash("golden generate --sequences 3 --out '" + dir.path().string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--config"));
}

TEST(GoldenRequest, ABadConfigFileIsAnErrorNamingIt) {
  ScratchDirectory dir;
  safetensors::testing::write_whole_file(dir / "bad.json", std::string_view("{\"hidden_size\": -1}"));
  const CliRun r = run_dflash("golden generate --config '" + (dir / "bad.json").string() + "' --out '" +
                              (dir / "x.safetensors").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad.json"));
}

// ---- compare through the CLI ---------------------------------------------------------------------

TEST(GoldenCompareCli, TheGoldenAgainstItselfPassesWithExitZero) {
  const std::string file = committed_golden("dropout").string();
  const CliRun r = run_dflash("golden compare --golden '" + file + "' --result '" + file + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("grad/fc.weight +F64 +0.000e\\+00 +1.000e-12 +PASS"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("ignored: [0-9]+ input/, frozen/ and param/ tensors"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("[0-9]+ tensors, rule exact: [0-9]+ PASS, 0 FAIL"));
}

TEST(GoldenCompareCli, ATamperedResultExitsOneNamingTheTensorAndJsonSaysTheSame) {
  ScratchDirectory dir;
  golden_testing::RawFile raw =
      golden_testing::RawFile::of(safetensors::testing::read_whole_file(committed_golden("dropout")));
  for (std::size_t i = 0; i < raw.tensors.at("grad/norm.weight").bytes.size() / 8; ++i) {
    raw.set_float("grad/norm.weight", i, raw.float_at("grad/norm.weight", i) * 1.1);
  }
  const std::string result = golden_testing::write_raw(dir, "result.safetensors", raw).string();
  const std::string args =
      "golden compare --golden '" + committed_golden("dropout").string() + "' --result '" + result + "' --rule bf16";
  const CliRun r = run_dflash(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("grad/norm.weight +F64 +[0-9.e+-]+ +[0-9.e+-]+ +FAIL"));
  EXPECT_THAT(r.out, HasSubstr(" PASS, 1 FAIL"));
  const CliRun j = run_dflash(args + " --json");
  EXPECT_EQ(j.exit_code, 1);
  const nlohmann::json report = nlohmann::json::parse(j.out);
  EXPECT_EQ(report.at("failures"), 1);
  EXPECT_EQ(report.at("rule"), "bf16");
}

TEST(GoldenCompareCli, ATruncatedResultFileExitsTwoNamingIt) {
  ScratchDirectory dir;
  std::vector<std::byte> bytes = safetensors::testing::read_whole_file(committed_golden("dropout"));
  bytes.resize(bytes.size() / 2);
  safetensors::testing::write_whole_file(dir / "cut.safetensors", bytes);
  const CliRun r = run_dflash("golden compare --golden '" + committed_golden("dropout").string() + "' --result '" +
                              (dir / "cut.safetensors").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr((dir / "cut.safetensors").string()));
}

TEST(GoldenCompareCli, AnUnknownRuleIsRejectedByTheFlag) {
  const std::string file = committed_golden("dropout").string();
  const CliRun r = run_dflash("golden compare --golden '" + file + "' --result '" + file + "' --rule fp16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--rule"));
}

}  // namespace
}  // namespace dflash
