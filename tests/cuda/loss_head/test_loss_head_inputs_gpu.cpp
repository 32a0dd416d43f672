// Bad input reaching the CUDA loss head on the device is found there and rejected with an
// InputError naming the element and its value (one test per kind), before any result is made.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "common/bf16.hpp"
#include "cuda/loss_head/problem.hpp"
#include "harness/cuda/gpu_test_support.hpp"
#include "tests/planner/expect_input_error.hpp"

namespace dflash {
namespace {

// dflash::CudaLossHead is written qualified: test_loss_head_gpu.cpp, compiled with this file in one
// unit (CMAKE_UNITY_BUILD), names its fixture CudaLossHead.

class CudaLossHeadInputs : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    problem_ = std::make_unique<LossHeadProblem<double>>(make_loss_head_problem<double>(host_, kSpec));
    device_ = std::make_unique<CudaLossHeadProblem>(upload_loss_head_problem(allocator(), *problem_));
    for (std::int64_t i = 0; i < kSpec.rows; ++i) (problem_->valid[i] ? valid_rows_ : invalid_rows_).push_back(i);
    ASSERT_GE(valid_rows_.size(), 2u);
    ASSERT_GE(invalid_rows_.size(), 1u);
  }

  template <class T>
  void set(DeviceBuffer<T>& buffer, std::int64_t index, T value) {
    copy_to_device(allocator(), buffer.data() + index, &value, sizeof(T));
  }
  void forward(double weight_sum, const CudaLossHeadTargets& targets) {
    dflash::CudaLossHead head(allocator(), LossHeadOptions{});
    head.forward(device_->hidden.data(), device_->shape, targets, weight_sum);
  }
  void forward() { forward(device_->weight_sum, device_->targets()); }

  // The forward throws InputError whose message names `argument` and contains `value`.
  static void expect_rejected(const std::function<void()>& run, const std::string& argument, const std::string& value) {
    expect_input_error(run, {"invalid " + argument + ":", value});
  }

  static constexpr LossHeadProblemSpec kSpec{
      .rows = 24, .hidden = 16, .vocab = 203, .seed = 31, .invalid_fraction = 0.25};
  MemoryTracker host_;
  std::unique_ptr<LossHeadProblem<double>> problem_;
  std::unique_ptr<CudaLossHeadProblem> device_;
  std::vector<std::int64_t> valid_rows_, invalid_rows_;
};

TEST_F(CudaLossHeadInputs, AcceptsAValidProblemWhoseInvalidRowsHaveNaNTeachers) { EXPECT_NO_THROW(forward()); }

TEST_F(CudaLossHeadInputs, RejectsALabelOutsideTheVocabularyNamingTheLowestRow) {
  const std::int64_t a = valid_rows_[0], b = valid_rows_[1];
  set<std::int64_t>(device_->labels, b, -4);
  set<std::int64_t>(device_->labels, a, kSpec.vocab);
  expect_rejected([&] { forward(); }, "labels[" + std::to_string(a) + "]", std::to_string(kSpec.vocab));
}

TEST_F(CudaLossHeadInputs, RejectsANegativeWeight) {
  const std::int64_t i = valid_rows_[1];
  set(device_->weights, i, -0.5f);
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(i) + "]", "-0.5");
}

TEST_F(CudaLossHeadInputs, RejectsANonFiniteWeight) {
  const std::int64_t i = valid_rows_[0];
  set(device_->weights, i, std::numeric_limits<float>::quiet_NaN());
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(i) + "]", "nan");
}

TEST_F(CudaLossHeadInputs, RejectsAWeightOnAnInvalidRow) {
  const std::int64_t i = invalid_rows_[0];
  set(device_->weights, i, 0.25f);
  expect_rejected([&] { forward(); }, "weights[" + std::to_string(i) + "]", "valid = 0");
}

TEST_F(CudaLossHeadInputs, RejectsAValidFlagThatIsNotZeroOrOne) {
  const std::int64_t i = valid_rows_[0];
  set<std::uint8_t>(device_->valid, i, 2);
  expect_rejected([&] { forward(); }, "valid[" + std::to_string(i) + "]", "2 is not 0 or 1");
}

TEST_F(CudaLossHeadInputs, RejectsAZeroWeightSumWithPositiveWeights) {
  expect_rejected([&] { forward(0.0, device_->targets()); }, "weight_sum", "zero while some row weights are positive");
}

TEST_F(CudaLossHeadInputs, RejectsNonFiniteHiddenNamingElementAndRow) {
  const std::int64_t e = 5 * kSpec.hidden + 3;
  set(device_->hidden, e, bf16_bits_from_float(std::numeric_limits<float>::quiet_NaN()));
  expect_rejected([&] { forward(); }, "hidden", "element " + std::to_string(e) + " (row 5) is nan");
}

TEST_F(CudaLossHeadInputs, RejectsNonFiniteLmHead) {
  const std::int64_t e = 100 * kSpec.hidden + 15;
  set(device_->lm_head, e, bf16_bits_from_float(-std::numeric_limits<float>::infinity()));
  expect_rejected([&] { forward(); }, "lm_head", "element " + std::to_string(e) + " (row 100) is -inf");
}

TEST_F(CudaLossHeadInputs, RejectsNonFiniteTeacherOnAValidRow) {
  const std::int64_t i = valid_rows_[1];
  set(device_->teacher_hidden, i * kSpec.hidden, bf16_bits_from_float(std::numeric_limits<float>::infinity()));
  expect_rejected([&] { forward(); }, "teacher_hidden", "(row " + std::to_string(i) + ") is inf");
}

TEST_F(CudaLossHeadInputs, RejectsAMissingLmHead) {
  CudaLossHeadTargets targets = device_->targets();
  targets.lm_head = nullptr;
  expect_rejected([&] { forward(device_->weight_sum, targets); }, "lm_head", "missing");
}

TEST_F(CudaLossHeadInputs, RejectsBackwardUnderAnotherPolicy) {
  LossHeadOptions o;
  o.policy = LossPolicy::chunk_grad_in_forward;
  dflash::CudaLossHead forward_head(allocator(), o);
  CudaLossHeadForward f =
      forward_head.forward(device_->hidden.data(), device_->shape, device_->targets(), device_->weight_sum);
  dflash::CudaLossHead backward_head(allocator(), LossHeadOptions{});
  expect_rejected([&] { backward_head.backward(device_->targets(), std::move(f.saved)); }, "loss_policy",
                  "chunk_grad_in_forward");
}

}  // namespace
}  // namespace dflash
