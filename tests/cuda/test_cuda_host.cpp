// What of the CUDA path runs without a GPU: the shared headers through nvcc's host pass, the
// error checks, the host-side validation of the loss head, and the device probe's answer.
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "cuda/loss_head/head.hpp"
#include "cuda/runtime/check.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "reference/counter_rng.hpp"
#include "tests/cuda/shared_header_paths.hpp"

namespace dflash {
namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

SharedHeaderInputs random_inputs(std::uint64_t seed, std::size_t columns, float tau, double scale) {
  CounterRng rng(seed);
  SharedHeaderInputs in;
  for (std::size_t v = 0; v < columns; ++v) {
    in.z.push_back(static_cast<float>(scale * rng.uniform(-1, 1)));
    in.t.push_back(static_cast<float>(scale * rng.uniform(-1, 1)));
  }
  in.z[columns / 3] = in.z[columns / 5];  // a tie for the argmax rule
  in.label = rng.below(static_cast<std::int64_t>(columns));
  in.tau = tau;
  in.to_round = {0.0f,
                 -0.0f,
                 1.0f,
                 1.00390625f,
                 1.005859375f,
                 3.4e38f,
                 -1e-40f,
                 std::numeric_limits<float>::infinity(),
                 std::numeric_limits<float>::quiet_NaN()};
  for (int k = 0; k < 32; ++k) in.to_round.push_back(static_cast<float>(rng.uniform(-1e4, 1e4)));
  in.seed = seed * 0x9E3779B97F4A7C15ull;
  return in;
}

TEST(CudaSharedHeaders, NvccHostPassComputesTheSameBitsAsTheHostCompiler) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const SharedHeaderInputs in = random_inputs(seed, 97 + 40 * seed, seed % 2 ? 1.0f : 0.35f, seed * 7.5);
    const SharedHeaderOutputs a = shared_headers_via_nvcc(in);
    const SharedHeaderOutputs b = shared_headers_via_host_compiler(in);
    EXPECT_TRUE(same_bits(a.stats, b.stats)) << "seed " << seed;
    EXPECT_EQ(a.indices, b.indices) << "seed " << seed;
    EXPECT_TRUE(same_bits(a.row, b.row)) << "seed " << seed;
    EXPECT_TRUE(same_bits(a.grads, b.grads)) << "seed " << seed;
    EXPECT_EQ(a.words, b.words) << "seed " << seed;
    EXPECT_EQ(a.bf16, b.bf16) << "seed " << seed;
    EXPECT_FALSE(a.grads.empty());
  }
}

// The streamed and the merged statistics (SharedHeaderOutputs::stats holds both, 8 each) agree
// to fp32 rounding, and exactly on the argmax, count, maxima and z[y].
TEST(CudaSharedHeaders, MergeOfTwoHalvesMatchesStreamingInFloat) {
  const SharedHeaderOutputs out = shared_headers_via_nvcc(random_inputs(9, 301, 0.5f, 20.0));
  ASSERT_EQ(out.stats.size(), 16u);
  EXPECT_EQ(out.indices[0], out.indices[2]);                                              // argmax
  EXPECT_EQ(out.indices[1], out.indices[3]);                                              // count
  for (int k : {0, 2, 4, 7}) EXPECT_EQ(out.stats[k], out.stats[8 + k]) << "field " << k;  // maxima, z[y]
  // Sums of at most 301 terms in float differ by at most 301 ulps of the sum of their magnitudes:
  // the sums of exponentials are positive; q_diff's terms are e (t - z), |t - z| <= 2 x 20.
  for (int k : {1, 3, 5}) {
    EXPECT_NEAR(out.stats[k], out.stats[8 + k], 301 * 0x1p-23 * out.stats[k]) << "field " << k;
  }
  EXPECT_NEAR(out.stats[6], out.stats[14], 301 * 0x1p-23 * out.stats[5] * 40.0);
}

// The message of the CudaError that `run` throws ("" if it throws none).
std::string cuda_error_message(const std::function<void()>& run) {
  try {
    run();
  } catch (const CudaError& e) {
    return e.what();
  }
  return "";
}

void expect_contains_all(const std::string& message, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(message.empty()) << "no CudaError";
  for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << " not in: " << message;
}

TEST(CudaCheck, CudaErrorNamesTheStatusTheCallAndThePlace) {
  expect_contains_all(cuda_error_message([] {
                        check_cuda(cudaErrorInvalidValue, "cudaMemcpy(dst, src, n, kind)", "some/file.cu", 42);
                      }),
                      {"cudaErrorInvalidValue", "cudaMemcpy(dst, src, n, kind)", "some/file.cu:42"});
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "cudaFree(p)", "f", 1));
}

TEST(CudaCheck, CublasErrorNamesTheStatusTheCallAndThePlace) {
  expect_contains_all(
      cuda_error_message([] { check_cublas(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGemmEx(...)", "gemm.cpp", 7); }),
      {"CUBLAS_STATUS_NOT_INITIALIZED", "cublasGemmEx(...)", "gemm.cpp:7"});
  EXPECT_NO_THROW(check_cublas(CUBLAS_STATUS_SUCCESS, "cublasCreate(&h)", "f", 1));
}

// A real failing call (an invalid device ordinal fails with or without a GPU) through the macro.
TEST(CudaCheck, MacroQuotesTheCallAndThisFile) {
  expect_contains_all(cuda_error_message([] { DFLASH_CUDA_CHECK(cudaSetDevice(-1)); }),
                      {"cudaSetDevice(-1)", "test_cuda_host.cpp:"});
}

TEST(CudaDeviceProbe, SaysWhyWhenThereIsNoGpu) {
  const CudaDeviceStatus& s = cuda_device_status();
  EXPECT_EQ(&s, &cuda_device_status());  // probed once
  if (s.available) {
    EXPECT_TRUE(s.reason.empty());
    EXPECT_FALSE(s.name.empty());
    EXPECT_GT(s.multiprocessors, 0);
    EXPECT_EQ(s.summary().find("no GPU"), std::string::npos);
  } else {
    EXPECT_FALSE(s.reason.empty());
    EXPECT_EQ(s.summary().rfind("no GPU: ", 0), 0u) << s.summary();
  }
}

// --- Host-side validation: bad options and shapes are rejected before any device work ---------

void expect_input_error(const LossHeadOptions& o, const CudaLossHeadShape& shape, double w, const std::string& argument,
                        const std::string& value) {
  try {
    validate_cuda_loss_head(o, shape, w);
    FAIL() << "no exception for " << argument;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("invalid " + argument), std::string::npos) << m;
    EXPECT_NE(m.find(value), std::string::npos) << m;
  }
}

const CudaLossHeadShape kShape{4, 8, 16};

TEST(CudaLossHeadValidation, AcceptsTheImplementedPolicies) {
  for (LossPolicy p : {LossPolicy::materialize, LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward}) {
    LossHeadOptions o;
    o.policy = p;
    EXPECT_NO_THROW(validate_cuda_loss_head(o, kShape, 1.0)) << loss_policy_name(p);
  }
  EXPECT_NO_THROW(validate_cuda_loss_head(LossHeadOptions{}, {0, 8, 16}, 0.0));  // T = 0: nothing to do
}

TEST(CudaLossHeadValidation, RejectsChunkRetain) {
  LossHeadOptions o;
  o.policy = LossPolicy::chunk_retain;
  expect_input_error(o, kShape, 1.0, "loss_policy", "chunk_retain");
}

TEST(CudaLossHeadValidation, RejectsLmHeadGradient) {
  LossHeadOptions o;
  o.lm_head_grad = true;
  expect_input_error(o, kShape, 1.0, "lm_head_grad", "true");
}

TEST(CudaLossHeadValidation, RejectsChunkRowsBelowOne) {
  LossHeadOptions o;
  o.chunk_rows = 0;
  expect_input_error(o, kShape, 1.0, "loss_chunk_rows", "0");
}

TEST(CudaLossHeadValidation, RejectsNonPositiveTemperature) {
  LossHeadOptions o;
  o.temperature = -0.5;
  expect_input_error(o, kShape, 1.0, "temperature", "-0.5");
}

TEST(CudaLossHeadValidation, RejectsNegativeHardWeight) {
  LossHeadOptions o;
  o.hard_weight = -1;
  expect_input_error(o, kShape, 1.0, "hard_weight", "-1");
}

TEST(CudaLossHeadValidation, RejectsNegativeRows) { expect_input_error({}, {-3, 8, 16}, 1.0, "rows", "-3"); }

TEST(CudaLossHeadValidation, RejectsZeroHidden) { expect_input_error({}, {4, 0, 16}, 1.0, "hidden_size", "0"); }

TEST(CudaLossHeadValidation, RejectsZeroVocab) { expect_input_error({}, {4, 8, 0}, 1.0, "vocab_size", "0"); }

TEST(CudaLossHeadValidation, RejectsNegativeWeightSum) { expect_input_error({}, kShape, -2.0, "weight_sum", "-2"); }

TEST(CudaLossHeadValidation, RejectsNonFiniteWeightSum) {
  expect_input_error({}, kShape, std::numeric_limits<double>::quiet_NaN(), "weight_sum", "nan");
}

// h, s, tau and W are narrowed to float for the kernels: out of float range is refused by name.
TEST(CudaLossHeadValidation, RejectsTemperatureBelowTheSmallestNormalFloat) {
  LossHeadOptions o;
  o.temperature = 1e-39;  // a positive double that float would hold as a subnormal (or 0 below ~1e-45)
  expect_input_error(o, kShape, 1.0, "temperature", str(o.temperature));
}

TEST(CudaLossHeadValidation, RejectsTemperatureBeyondFloat) {
  LossHeadOptions o;
  o.temperature = 1e39;
  expect_input_error(o, kShape, 1.0, "temperature", str(o.temperature));
}

TEST(CudaLossHeadValidation, RejectsHardWeightBeyondFloat) {
  LossHeadOptions o;
  o.hard_weight = 1e39;
  expect_input_error(o, kShape, 1.0, "hard_weight", str(o.hard_weight));
}

TEST(CudaLossHeadValidation, RejectsSoftWeightBeyondFloat) {
  LossHeadOptions o;
  o.soft_weight = 5e38;
  expect_input_error(o, kShape, 1.0, "soft_weight", str(o.soft_weight));
}

TEST(CudaLossHeadValidation, RejectsWeightSumBeyondFloat) {
  expect_input_error({}, kShape, 1e39, "weight_sum", str(1e39));
}

TEST(CudaLossHeadValidation, AcceptsTheSmallestNormalFloatTemperature) {
  LossHeadOptions o;
  o.temperature = double(std::numeric_limits<float>::min());
  EXPECT_NO_THROW(validate_cuda_loss_head(o, kShape, 1.0));
}

}  // namespace
}  // namespace dflash
