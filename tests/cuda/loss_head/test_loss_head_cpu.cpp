// The loss head's chunk loop (cuda/loss_head/chunked_head.hpp: the code the GPU runs) on the CPU
// backend (harness/cuda/host_loss_head_backend.hpp: the row kernels' block programs over their
// grids, plain fp32 products), in every CI run:
//  - every policy and chunk of the GPU test's shapes (tests/cuda/loss_head/cases.hpp) within SPEC
//    §10's bf16 rule of the double reference;
//  - every policy, chunk and thread order bitwise equal: on this backend each row's arithmetic is
//    the same wherever its chunk starts, so any difference is a row listed, gathered, scattered,
//    zeroed or kept wrongly;
//  - what each policy holds, per category, equal to the planner's cuda_loss_head_memory, and
//    nothing left after backward (the CPU twin of tests/cuda/drafter/test_cuda_memory_plan_gpu.cpp);
//  - bad per-row targets and non-finite inputs rejected naming the lowest offending element, as on
//    the device (tests/cuda/loss_head/test_loss_head_inputs_gpu.cpp).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "cuda/loss_head/chunked_head.hpp"
#include "harness/cuda/host_loss_head_backend.hpp"
#include "planner/loss_head_memory.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/loss_head_compare.hpp"
#include "tests/cuda/loss_head/cases.hpp"
#include "tests/planner/expect_input_error.hpp"

namespace dflash {
namespace {

using HostHead = ChunkedLossHead<HostLossHeadBackend>;

// A reference problem in the backend's memory and formats (bf16 tensors, fp32 weights), as
// upload_loss_head_problem (cuda/loss_head/problem.hpp) puts it on the device.
struct HostLossHeadProblem {
  CudaLossHeadShape shape;
  HostBuffer<Bf16Bits> hidden, teacher_hidden, lm_head;
  HostBuffer<std::int64_t> labels;
  HostBuffer<float> weights;
  HostBuffer<std::uint8_t> valid;
  double weight_sum = 0;

  CudaLossHeadTargets targets() const {
    return {teacher_hidden.data(), lm_head.data(), {labels.data(), weights.data(), valid.data()}};
  }
};

HostLossHeadProblem put_in(const HostLossHeadBackend& be, const LossHeadProblem<double>& p) {
  const std::vector<float> weights(p.weights.begin(), p.weights.end());
  return {{p.hidden.dim(0), p.hidden.dim(1), p.lm_head.dim(0)},
          be.from_host(MemoryCategory::inputs, bf16_bits_of(p.hidden.data(), p.hidden.numel())),
          be.from_host(MemoryCategory::inputs, bf16_bits_of(p.teacher_hidden.data(), p.teacher_hidden.numel())),
          be.from_host(MemoryCategory::frozen, bf16_bits_of(p.lm_head.data(), p.lm_head.numel())),
          be.from_host(MemoryCategory::inputs, p.labels),
          be.from_host(MemoryCategory::inputs, weights),
          be.from_host(MemoryCategory::inputs, p.valid),
          p.weight_sum};
}

Tensor<double> widened(MemoryTracker& host, MemoryCategory category, Shape shape, const std::vector<float>& values) {
  Tensor<double> t(host, category, std::move(shape));
  for (std::size_t e = 0; e < values.size(); ++e) t[static_cast<std::int64_t>(e)] = values[e];
  return t;
}

// Forward then backward, read back as run_loss_head_cuda reads the device's.
LossHeadResult<double> run_on_host(const HostLossHeadBackend& be, MemoryTracker& host, const LossHeadOptions& options,
                                   const HostLossHeadProblem& p) {
  HostHead head(be, options);
  HostHead::Forward f = head.forward(p.hidden.data(), p.shape, p.targets(), p.weight_sum);
  const HostBuffer<float> hidden_grad = head.backward(p.targets(), std::move(f.saved));
  const std::int64_t T = p.shape.rows, H = p.shape.hidden;
  return {f.stats, widened(host, MemoryCategory::outputs, {T}, be.to_host(f.lse)),
          widened(host, MemoryCategory::outputs, {T}, be.to_host(f.token_loss)),
          widened(host, MemoryCategory::gradients, {T, H}, be.to_host(hidden_grad)), std::nullopt};
}

class HostLossHeadCases : public ::testing::TestWithParam<CudaCase> {};

TEST_P(HostLossHeadCases, EveryPolicyAndChunkWithinTheBf16RuleAndAllBitwiseEqual) {
  const CudaCase& c = GetParam();
  MemoryTracker host, memory;
  const LossHeadProblem<double> problem = make_loss_head_problem<double>(host, c.spec);
  const Bf16RuleOracle oracle(problem, c.options(LossPolicy::chunk_recompute, 1));
  const HostLossHeadBackend be{memory};
  const HostLossHeadProblem p = put_in(be, oracle.device_problem());

  std::optional<LossHeadResult<double>> first;
  for (const auto& [policy, chunk] : case_runs(c)) {
    SCOPED_TRACE(std::string(loss_policy_name(policy)) + " chunk " + std::to_string(chunk));
    LossHeadResult<double> r = run_on_host(be, host, c.options(policy, chunk), p);
    const Bf16RuleReport report = oracle.check(r);
    EXPECT_TRUE(report.ok()) << report.describe();
    if (!first) {
      first.emplace(std::move(r));
    } else {
      EXPECT_TRUE(loss_head_results_identical(*first, r)) << "differs from the first run's bits";
    }
  }
  const HostLossHeadBackend reversed{memory, true};
  const auto [policy, chunk] = case_runs(c).back();
  EXPECT_TRUE(loss_head_results_identical(*first, run_on_host(reversed, host, c.options(policy, chunk), p)))
      << "a phase's threads depend on one another's order";
}

INSTANTIATE_TEST_SUITE_P(Shapes, HostLossHeadCases, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<CudaCase>& info) { return info.param.name; });

// ---- memory -----------------------------------------------------------------------------------------

// The small records alive beside the plan (input faults: 8 counters; the valid-row count; totals:
// 6 numbers), each at most 64 bytes.
constexpr std::size_t kSmallRecordBytes = 3 * 64;

TEST(HostLossHeadMemory, EachPolicyHoldsWhatThePlanSaysAndNothingAfterBackward) {
  const LossHeadProblemSpec spec{.rows = 45, .hidden = 24, .vocab = 203, .seed = 9, .invalid_fraction = 0.3};
  MemoryTracker host;
  const LossHeadProblem<double> problem = make_loss_head_problem<double>(host, spec);
  const std::pair<LossPolicy, std::int64_t> runs[] = {{LossPolicy::materialize, spec.rows},
                                                      {LossPolicy::chunk_recompute, 7},
                                                      {LossPolicy::chunk_recompute, 64},
                                                      {LossPolicy::chunk_grad_in_forward, 7},
                                                      {LossPolicy::chunk_grad_in_forward, 45}};
  for (const auto& [policy, chunk] : runs) {
    SCOPED_TRACE(std::string(loss_policy_name(policy)) + " chunk " + std::to_string(chunk));
    MemoryTracker memory;
    const HostLossHeadBackend be{memory};
    const HostLossHeadProblem p = put_in(be, problem);
    LossHeadOptions o;
    o.policy = policy;
    o.chunk_rows = chunk;
    std::size_t saved_after_forward = 0, left = 0;
    {
      HostHead head(be, o);
      HostHead::Forward f = head.forward(p.hidden.data(), p.shape, p.targets(), p.weight_sum);
      saved_after_forward = memory.current(MemoryCategory::loss_saved);
      const HostBuffer<float> g = head.backward(p.targets(), std::move(f.saved));
      left = memory.current(MemoryCategory::loss_saved) + memory.current(MemoryCategory::transient);
    }
    // The production formats: bf16 rows and logits, fp32 statistics and dL/dY.
    const LossHeadShape s{
        .rows = spec.rows, .hidden = spec.hidden, .vocab = spec.vocab, .chunk_rows = chunk, .gradient_bytes = 4};
    const CategoryBytes plan = cuda_loss_head_memory(s, policy);
    EXPECT_EQ(saved_after_forward, std::size_t(plan[PlanCategory::loss_saved]));
    EXPECT_EQ(memory.peak(MemoryCategory::loss_saved), std::size_t(plan[PlanCategory::loss_saved]));
    EXPECT_GE(memory.peak(MemoryCategory::transient), std::size_t(plan[PlanCategory::transient]));
    EXPECT_LE(memory.peak(MemoryCategory::transient), std::size_t(plan[PlanCategory::transient]) + kSmallRecordBytes);
    EXPECT_EQ(memory.peak(MemoryCategory::gradients), std::size_t(plan[PlanCategory::gradients]));
    EXPECT_EQ(memory.peak(MemoryCategory::outputs), std::size_t(plan[PlanCategory::outputs]));
    EXPECT_EQ(left, 0u) << "backward frees what forward kept";
  }
}

// ---- bad input ----------------------------------------------------------------------------------

class HostLossHeadInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::int64_t i = 0; i < kSpec.rows; ++i) (problem_.valid[i] ? valid_rows_ : invalid_rows_).push_back(i);
    ASSERT_GE(valid_rows_.size(), 2u);
    ASSERT_GE(invalid_rows_.size(), 1u);
  }
  void forward(double weight_sum, const CudaLossHeadTargets& targets) {
    HostHead head(be_, LossHeadOptions{});
    head.forward(p_.hidden.data(), p_.shape, targets, weight_sum);
  }
  void forward() { forward(p_.weight_sum, p_.targets()); }
  // The forward throws InputError whose message names `argument` and contains `value`.
  static void expect_rejected(const std::function<void()>& run, const std::string& argument, const std::string& value) {
    expect_input_error(run, {"invalid " + argument + ":", value});
  }

  static constexpr LossHeadProblemSpec kSpec{
      .rows = 24, .hidden = 16, .vocab = 203, .seed = 31, .invalid_fraction = 0.25};
  MemoryTracker host_, memory_;
  LossHeadProblem<double> problem_ = make_loss_head_problem<double>(host_, kSpec);
  HostLossHeadBackend be_{memory_};
  HostLossHeadProblem p_ = put_in(be_, problem_);
  std::vector<std::int64_t> valid_rows_, invalid_rows_;
};

TEST_F(HostLossHeadInputs, AcceptsAValidProblemWhoseInvalidRowsHaveNaNTeachers) { EXPECT_NO_THROW(forward()); }

TEST_F(HostLossHeadInputs, RejectsALabelOutsideTheVocabularyNamingTheLowestRow) {
  const std::int64_t a = valid_rows_[0], b = valid_rows_[1];
  p_.labels.data()[b] = -4;
  p_.labels.data()[a] = kSpec.vocab;
  expect_rejected([&] { forward(); }, "labels[" + std::to_string(a) + "]", std::to_string(kSpec.vocab));
}

TEST_F(HostLossHeadInputs, RejectsBadWeightsNamingTheLowestRow) {
  const std::int64_t a = valid_rows_[0], b = valid_rows_[1];
  p_.weights.data()[b] = std::numeric_limits<float>::quiet_NaN();
  p_.weights.data()[a] = -0.5f;
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(a) + "]", "-0.5");
  p_.weights.data()[a] = std::numeric_limits<float>::infinity();
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(a) + "]", "inf");
}

TEST_F(HostLossHeadInputs, RejectsAWeightOnAnInvalidRow) {
  const std::int64_t i = invalid_rows_[0];
  p_.weights.data()[i] = 0.25f;
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(i) + "]", "valid = 0");
}

TEST_F(HostLossHeadInputs, RejectsAValidFlagThatIsNotZeroOrOne) {
  const std::int64_t i = valid_rows_[1];
  p_.valid.data()[i] = 2;
  expect_rejected([&] { forward(); }, "valid[" + std::to_string(i) + "]", "2 is not 0 or 1");
}

TEST_F(HostLossHeadInputs, RejectsAZeroWeightSumWithPositiveWeights) {
  expect_rejected([&] { forward(0.0, p_.targets()); }, "weight_sum", "zero while some row weights are positive");
}

TEST_F(HostLossHeadInputs, RejectsNonFiniteHiddenLmHeadAndValidTeacherRowsNamingTheFirst) {
  const std::int64_t e = 5 * kSpec.hidden + 3;
  p_.hidden.data()[e + 40] = bf16_bits_from_float(std::numeric_limits<float>::infinity());
  p_.hidden.data()[e] = bf16_bits_from_float(std::numeric_limits<float>::quiet_NaN());
  expect_rejected([&] { forward(); }, "hidden", "element " + std::to_string(e) + " (row 5) is nan");
  p_.hidden.data()[e] = p_.hidden.data()[e + 40] = 0;

  const std::int64_t w = 100 * kSpec.hidden + 15;
  p_.lm_head.data()[w] = bf16_bits_from_float(-std::numeric_limits<float>::infinity());
  expect_rejected([&] { forward(); }, "lm_head", "element " + std::to_string(w) + " (row 100) is -inf");
  p_.lm_head.data()[w] = 0;

  const std::int64_t i = valid_rows_[1];
  p_.teacher_hidden.data()[i * kSpec.hidden] = bf16_bits_from_float(std::numeric_limits<float>::infinity());
  expect_rejected([&] { forward(); }, "teacher_hidden", "(row " + std::to_string(i) + ") is inf");
}

TEST_F(HostLossHeadInputs, RejectsMissingTensors) {
  CudaLossHeadTargets targets = p_.targets();
  targets.lm_head = nullptr;
  expect_rejected([&] { forward(p_.weight_sum, targets); }, "lm_head", "missing");
  targets = p_.targets();
  targets.rows.valid = nullptr;
  expect_rejected([&] { forward(p_.weight_sum, targets); }, "labels/weights/valid", "missing");
}

TEST_F(HostLossHeadInputs, RejectsBackwardUnderAnotherPolicy) {
  LossHeadOptions o;
  o.policy = LossPolicy::chunk_grad_in_forward;
  HostHead forward_head(be_, o);
  HostHead::Forward f = forward_head.forward(p_.hidden.data(), p_.shape, p_.targets(), p_.weight_sum);
  HostHead backward_head(be_, LossHeadOptions{});
  expect_rejected([&] { backward_head.backward(p_.targets(), std::move(f.saved)); }, "loss_policy",
                  "chunk_grad_in_forward");
}

TEST_F(HostLossHeadInputs, RejectsBadOptionsBeforeTouchingTheBackend) {
  LossHeadOptions o;
  o.policy = LossPolicy::chunk_retain;
  const std::size_t before = memory_.current(MemoryCategory::transient);
  expect_rejected([&] { HostHead head(be_, o); }, "loss_policy", "chunk_retain");
  EXPECT_EQ(memory_.current(MemoryCategory::transient), before);
}

}  // namespace
}  // namespace dflash
