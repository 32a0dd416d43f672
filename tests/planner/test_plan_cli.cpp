// `dflash plan` as a user runs it: the built binary (DFLASH_BIN, else the build's), both forms, the SPEC §8 numbers
// in the JSON, the table's verdicts, the JSON equal to the library's plan, and every bad flag
// value rejected with the flag named and a non-zero exit code.

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "distributed/checkpoint/save_restore.hpp"

#include "planner/host_memory.hpp"
#include "planner/plan_report.hpp"
#include "planner/policy_verdicts.hpp"
#include "tests/planner/source_configs.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using nlohmann::json;

using testing_support::CliRun;

// Runs `dflash plan <args>` from the source directory (so configs/ paths resolve).
CliRun plan(const std::string& args) { return testing_support::run_dflash("plan " + args, source_dir()); }

json plan_json_of(const std::string& args) {
  const CliRun r = plan(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

TEST(PlanCli, SpecExampleOneThroughTheCli) {
  const json j = plan_json_of("--config configs/qwen3.6-27b.json --loss-chunk-rows 2048");
  const json& h = j.at("loss_head");
  EXPECT_EQ(h.at("full_logits_bytes").get<std::int64_t>(), 16'273'899'520);
  EXPECT_EQ(h.at("chunk_logits_bytes").get<std::int64_t>(), 1'017'118'720);
  EXPECT_EQ(h.at("saved_bytes").at("chunk_retain").get<std::int64_t>(), 32'547'799'040);
  EXPECT_EQ(h.at("saved_bytes").at("materialize").get<std::int64_t>(), 32'547'799'040);
  EXPECT_EQ(h.at("saved_bytes").at("chunk_recompute").get<std::int64_t>(), 335'544'320);
  // dL/dY is as wide as the input rows, at the gradient precision (fp32: twice the bf16 rows).
  EXPECT_EQ(h.at("saved_bytes").at("chunk_grad_in_forward").get<std::int64_t>(), 2 * 335'544'320);
  EXPECT_EQ(h.at("saved_input_bytes").get<std::int64_t>(), 335'544'320);
}

TEST(PlanCli, SpecExampleTwoThroughTheCli) {
  const json j = plan_json_of("--decoder configs/decoder-example-64l.json --tokens 8192 --checkpoint-every 4");
  const json& a = j.at("activations");
  EXPECT_EQ(a.at("attention_values_per_token").get<std::int64_t>(), 35'840);
  EXPECT_EQ(a.at("mlp_values_per_token").get<std::int64_t>(), 62'464);
  EXPECT_EQ(a.at("values_per_token_per_layer").get<std::int64_t>(), 98'304);
  EXPECT_EQ(a.at("all_layers_bytes").get<std::int64_t>(), 103'079'215'104);
  EXPECT_EQ(a.at("residual_only_bytes").get<std::int64_t>(), 5LL << 30);
  EXPECT_EQ(a.at("boundary_bytes").get<std::int64_t>(), 1'342'177'280);
  EXPECT_EQ(a.at("live_segment_bytes").get<std::int64_t>(), 6'442'450'944);
  EXPECT_EQ(a.at("checkpointed_bytes").get<std::int64_t>(), 1'342'177'280 + 6'442'450'944);
  std::int64_t listed = 0;
  for (const json& t : a.at("saved_tensors")) listed += t.at("values_per_token").get<std::int64_t>();
  EXPECT_EQ(listed, 98'304);
}

TEST(PlanCli, JsonHasTheDocumentedSchema) {
  const json j = plan_json_of("--config configs/qwen3.6-27b.json");
  for (const char* key : {"full_logits_bytes", "chunk_logits_bytes", "saved_bytes", "saved_input_bytes"}) {
    EXPECT_TRUE(j.at("loss_head").contains(key)) << key;
  }
  for (const char* key :
       {"values_per_token_per_layer", "all_layers_bytes", "residual_only_bytes", "checkpointed_bytes"}) {
    EXPECT_TRUE(j.at("activations").at(key).is_number_integer()) << key;
  }
  std::int64_t sum = 0;
  for (PlanCategory c : kAllPlanCategories)
    sum += j.at("categories").at(std::string(plan_category_name(c))).get<std::int64_t>();
  EXPECT_EQ(j.at("total_bytes").get<std::int64_t>(), sum);
  EXPECT_EQ(j.at("device_bytes").get<std::int64_t>(), 95'000'000'000);
  EXPECT_TRUE(j.at("fits").is_boolean());
  // One fp32 checkpoint: 3 P x 4 bytes, the two files' headers and the state's 16 MiB limit.
  const std::uint64_t checkpoint = j.at("checkpoint_bytes").get<std::uint64_t>();
  EXPECT_EQ(checkpoint,
            checkpoint_bytes(load_drafter_config(source_dir() / "configs/qwen3.6-27b.json"), safetensors::Dtype::F32));
  EXPECT_GT(checkpoint, std::uint64_t(3) * 1'730'213'120 * 4 + (std::uint64_t(16) << 20));
  EXPECT_LT(checkpoint, std::uint64_t(3) * 1'730'213'120 * 4 + (std::uint64_t(17) << 20));
  EXPECT_EQ(j.at("verdicts").size(), 18u);  // 3 loss policies (the CUDA step offers no chunk_retain) x 3 x 2
  // TRAINING §13's collectives at the stated bandwidths: 8 GPUs under ZeRO-1 reduce-scatter and all-gather.
  const json& comm = j.at("communication");
  EXPECT_EQ(comm.at("collectives").size(), 2u);
  EXPECT_GT(comm.at("nvlink_seconds").get<double>(), 0);
  EXPECT_GT(comm.at("inter_node_seconds").get<double>(), comm.at("nvlink_seconds").get<double>());
  // Whether the gradient reduction hides behind backward (planner/gradient_overlap.hpp).
  const json& overlap = comm.at("overlap");
  for (const char* key : {"peak_flops_per_second", "achieved_fraction_of_peak", "achieved_flops_per_second",
                          "window_flops", "window_seconds", "step_backward_seconds"}) {
    EXPECT_GT(overlap.at(key).get<double>(), 0) << key;
  }
  EXPECT_GT(overlap.at("buckets").get<std::int64_t>(), 0);
  for (const char* link : {"nvlink", "inter_node"}) {
    const json& l = overlap.at(link);
    EXPECT_GT(l.at("gradient_seconds").get<double>(), 0) << link;
    EXPECT_GT(l.at("exposed_seconds").get<double>(), 0) << link;
    EXPECT_GT(l.at("after_backward_seconds").get<double>(), 0) << link;  // ZeRO-1's all-gather
    EXPECT_TRUE(l.at("fits_in_backward").is_boolean()) << link;
  }
}

TEST(PlanCli, JsonIsTheLibrarysPlan) {
  const std::string args =
      "--config configs/qwen3.6-27b.json --tokens 16384 --context 2048 --loss-chunk-rows 1000 "
      "--loss-policy chunk_grad_in_forward --trunk-policy every_k --checkpoint-every 2 --gpus 4 "
      "--zero 0 --gpu-memory 80GiB --sequences 2 --micro-steps 3 --gpus-per-node 2";
  json cli = plan_json_of(args);
  PlanRequest r = full_scale_request();
  r.tokens = 16384;
  r.context = 2048;
  r.loss_chunk_rows = 1000;
  r.loss_policy = LossPolicy::chunk_grad_in_forward;
  r.trunk_policy = TrunkPolicy::every_k;
  r.checkpoint_every = 2;
  r.layout.gpus = 4;
  r.layout.zero_stage = 0;
  r.device_bytes = std::int64_t(80) << 30;
  r.sequences = 2;
  r.micro_steps = 3;
  const std::vector<PolicyVerdict> verdicts = policy_verdicts(r);
  json library = plan_json(plan_training_memory(r), verdicts);
  library["checkpoint_bytes"] = checkpoint_bytes(r.config, safetensors::Dtype::F32);
  library["host"] = host_memory_json(*plan_host_memory(r, /*gpus_per_node=*/2));
  cli.erase("config");
  EXPECT_EQ(cli, library);
  // And each verdict row holds its combination's numbers (the equality above would not see a field
  // written from the wrong member on both sides).
  ASSERT_EQ(cli.at("verdicts").size(), verdicts.size());
  for (std::size_t k = 0; k < verdicts.size(); ++k) {
    EXPECT_EQ(cli.at("verdicts")[k].at("total_bytes"), verdicts[k].total_bytes) << k;
    EXPECT_EQ(cli.at("verdicts")[k].at("fits"), verdicts[k].fits) << k;
    EXPECT_EQ(cli.at("verdicts")[k].at("zero"), verdicts[k].zero_stage) << k;
  }
}

// The table's combination rows: ZeRO-0's verdict, then ZeRO-1's. On 8 GPUs, materialize with
// per_layer does not fit under ZeRO-0 and fits under ZeRO-1 (the sharded optimizer state).
TEST(PlanCli, TableVerdictsAreEachZeroStagesOwn) {
  const CliRun r = plan("--config configs/qwen3.6-27b.json --gpus 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = plan_json_of("--config configs/qwen3.6-27b.json --gpus 8");
  int differing = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;  // columns are separated by two or more spaces
    for (std::size_t at = 0; at < line.size();) {
      const std::size_t begin = line.find_first_not_of(' ', at);
      if (begin == std::string::npos) break;
      std::size_t end = line.find("  ", begin);
      if (end == std::string::npos) end = line.size();
      cells.push_back(line.substr(begin, end - begin));
      at = end;
    }
    if (cells.size() != 6) continue;
    for (std::size_t k = 0; k + 1 < j.at("verdicts").size(); k += 2) {
      const json& z0 = j.at("verdicts")[k];
      const json& z1 = j.at("verdicts")[k + 1];
      if (cells[0] != z0.at("loss_policy") || cells[1] != z0.at("trunk_policy")) continue;
      EXPECT_EQ(cells[3], z0.at("fits").get<bool>() ? "fits" : "does not fit") << line;
      EXPECT_EQ(cells[5], z1.at("fits").get<bool>() ? "fits" : "does not fit") << line;
      differing += z0.at("fits") != z1.at("fits");
    }
  }
  EXPECT_GT(differing, 0) << r.out;  // a row where the two stages differ, or the check proves nothing
}

TEST(PlanCli, TableShowsCategoriesVerdictAndEveryCombination) {
  const CliRun r = plan("--config configs/qwen3.6-27b.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (PlanCategory c : kAllPlanCategories) EXPECT_NE(r.out.find(plan_category_label(c)), std::string::npos);
  EXPECT_NE(r.out.find("verdict: "), std::string::npos);
  for (LossPolicy p : kAllLossPolicies) EXPECT_NE(r.out.find(loss_policy_name(p)), std::string::npos);
  const json j = plan_json_of("--config configs/qwen3.6-27b.json");
  EXPECT_NE(r.out.find(j.at("fits").get<bool>() ? "verdict: FITS" : "verdict: DOES NOT FIT"), std::string::npos);
  for (const char* part :
       {"reduce_scatter gradients", "the last sequence's trunk backward", "NVLink", "inter-node", "exposed",
        "then the all-gather", "host memory per rank", "resumed start", "checkpoint write", "node: 8 rank(s)"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " not in:\n" << r.out;
  }
}

TEST(PlanCli, TinyDeviceDoesNotFit) {
  const json j = plan_json_of("--config configs/qwen3.6-27b.json --gpu-memory 16GiB");
  EXPECT_FALSE(j.at("fits").get<bool>());
  const CliRun r = plan("--config configs/qwen3.6-27b.json --gpu-memory 16GiB");
  EXPECT_NE(r.out.find("verdict: DOES NOT FIT"), std::string::npos);
}

void expect_flag_error(const std::string& args, const std::string& flag, const std::string& fragment) {
  const CliRun r = plan(args);
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_NE(r.err.find(flag), std::string::npos) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << args << "\n" << r.err;
}

const std::string kConfig = "--config configs/qwen3.6-27b.json ";

TEST(PlanCli, UnknownLossPolicy) { expect_flag_error(kConfig + "--loss-policy chunky", "--loss-policy", "'chunky'"); }
TEST(PlanCli, UnknownTrunkPolicy) { expect_flag_error(kConfig + "--trunk-policy all", "--trunk-policy", "'all'"); }
TEST(PlanCli, ZeroTokens) { expect_flag_error(kConfig + "--tokens 0", "--tokens", "at least 1"); }
TEST(PlanCli, NegativeTokens) { expect_flag_error(kConfig + "--tokens -32", "--tokens", "at least 1"); }
TEST(PlanCli, TokensNotWholeBlocks) { expect_flag_error(kConfig + "--tokens 100", "--tokens", "block_size"); }
TEST(PlanCli, ZeroContext) { expect_flag_error(kConfig + "--context 0", "--context", "at least 1"); }
TEST(PlanCli, NegativeChunkRows) {
  expect_flag_error(kConfig + "--loss-chunk-rows -1", "--loss-chunk-rows", "at least 1");
}
TEST(PlanCli, ZeroCheckpointInterval) {
  expect_flag_error(kConfig + "--checkpoint-every 0", "--checkpoint-every", "at least 1");
}
TEST(PlanCli, ZeroGpus) { expect_flag_error(kConfig + "--gpus 0", "--gpus", "at least 1"); }
TEST(PlanCli, ZeroSequences) { expect_flag_error(kConfig + "--sequences 0", "--sequences", "at least 1"); }
TEST(PlanCli, ZeroMicroSteps) { expect_flag_error(kConfig + "--micro-steps 0", "--micro-steps", "at least 1"); }
TEST(PlanCli, ZeroGpusPerNode) { expect_flag_error(kConfig + "--gpus-per-node 0", "--gpus-per-node", "at least 1"); }
TEST(PlanCli, ZeroStageTwo) { expect_flag_error(kConfig + "--zero 2", "--zero", "not 0 or 1"); }
TEST(PlanCli, MemoryWithUnknownUnit) {
  expect_flag_error(kConfig + "--gpu-memory 95XB", "--gpu-memory", "'95XB' is not a size");
}
TEST(PlanCli, ZeroMemory) { expect_flag_error(kConfig + "--gpu-memory 0", "--gpu-memory", "zero"); }
TEST(PlanCli, NegativeMemory) { expect_flag_error(kConfig + "--gpu-memory=-95GB", "--gpu-memory", "negative"); }
TEST(PlanCli, TokensThatAreNotANumber) { expect_flag_error(kConfig + "--tokens many", "--tokens", "many"); }
TEST(PlanCli, DecoderWithoutTokens) {
  expect_flag_error("--decoder configs/decoder-example-64l.json", "--tokens", "required with --decoder");
}
TEST(PlanCli, DecoderZeroTokens) {
  expect_flag_error("--decoder configs/decoder-example-64l.json --tokens 0", "--tokens", "at least 1");
}
TEST(PlanCli, BothFormsAtOnce) {
  expect_flag_error(kConfig + "--decoder configs/decoder-example-64l.json --tokens 8", "--decoder", "excludes");
}
TEST(PlanCli, NeitherForm) { expect_flag_error("--tokens 8", "--config", "--decoder"); }
TEST(PlanCli, MissingConfigFile) { expect_flag_error("--config configs/nope.json", "config file", "nope.json"); }

}  // namespace
}  // namespace dflash
