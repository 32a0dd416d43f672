// The CUDA part of the verification matrix (`dflash verify --device cuda`): the CUDA loss head,
// every policy, against the double reference under SPEC §10's rule for low-precision results.
// A row's error is the worst ratio, over every reported quantity, of the CUDA error to its bound
// (2 x the plain bf16 computation's error + floor; reference/bf16_tolerance.hpp): it passes at <= 1.
// Without a usable GPU every row is reported SKIPPED with the reason.
#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "cuda/loss_head/problem.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "reference/bf16_tolerance.hpp"
#include "reference/loss_head_compare.hpp"
#include "verify/rows.hpp"

namespace dflash {
namespace {

struct CudaVerifyCase {
  std::string name;
  LossHeadProblemSpec spec;
  double tau, hard, soft;
  std::int64_t chunk;

  LossHeadOptions options(LossPolicy policy) const {
    return {.hard_weight = hard, .soft_weight = soft, .temperature = tau, .policy = policy, .chunk_rows = chunk};
  }
};

std::vector<CudaVerifyCase> cuda_verify_cases() {
  return {
      {"T37-H24-V301", {.rows = 37, .hidden = 24, .vocab = 301, .seed = 201}, 1.0, 0.85, 0.15, 5},
      {"T29-H16-V520-tau0.5",
       {.rows = 29, .hidden = 16, .vocab = 520, .seed = 202, .teacher_scale = 2.0},
       0.5,
       0.7,
       0.3,
       8},
      {"T17-H8-V203-extreme",
       {.rows = 17, .hidden = 8, .vocab = 203, .seed = 203, .logit_scale = 1e4},
       0.05,
       0.85,
       0.15,
       4},
      {"T19-H16-V128-W0",
       {.rows = 19, .hidden = 16, .vocab = 128, .seed = 204, .all_weights_zero = true},
       1.0,
       0.85,
       0.15,
       6},
  };
}

constexpr LossPolicy kCudaPolicies[] = {LossPolicy::materialize, LossPolicy::chunk_recompute,
                                        LossPolicy::chunk_grad_in_forward};
const char* const kBitwiseVariant = "recompute = grad_in_forward";
const char* const kRule =
    "worst error / (2 x plain bf16 error + floor) over loss, ce, kl, lse, token loss, dL/dY, "
    "accuracy";

std::string variant_name(LossPolicy policy, std::int64_t chunk) {
  return std::string(loss_policy_name(policy)) +
         (policy == LossPolicy::materialize ? "" : "/c" + std::to_string(chunk));
}

}  // namespace

std::vector<VerifyRow> verify_cuda_rows() {
  std::vector<VerifyRow> rows;
  const CudaDeviceStatus& gpu = cuda_device_status();
  for (const CudaVerifyCase& c : cuda_verify_cases()) {
    const auto name = [&](std::string variant) {
      return RowName{.group = "cuda", .case_name = c.name, .variant = std::move(variant)};
    };
    if (!gpu.available) {
      for (LossPolicy policy : kCudaPolicies) {
        rows.push_back(skipped_row(name(variant_name(policy, c.chunk)), "no GPU: " + gpu.reason));
      }
      rows.push_back(skipped_row(name(kBitwiseVariant), "no GPU: " + gpu.reason));
      continue;
    }
    MemoryTracker host;
    const Bf16RuleOracle oracle(make_loss_head_problem<double>(host, c.spec), c.options(LossPolicy::chunk_recompute));
    DeviceAllocator allocator;
    const CudaLossHeadProblem device = upload_loss_head_problem(allocator, oracle.device_problem());
    std::vector<LossHeadResult<double>> chunked;
    for (LossPolicy policy : kCudaPolicies) {
      const std::string variant = variant_name(policy, c.chunk);
      try {
        allocator.reset_peaks();
        LossHeadResult<double> r = run_loss_head_cuda(allocator, host, c.options(policy), device);
        const Bf16RuleReport report = oracle.check(r);
        std::string note = kRule;
        for (const ToleranceEntry& e : report.entries) {
          if (!e.ok()) note = "FAILS: " + e.quantity + " " + report.describe();
        }
        // The error is already a ratio to its bound: it passes at <= 1.
        rows.push_back(tolerance_row(name(variant), {.error = report.worst_ratio(),
                                                     .tolerance = 1.0,
                                                     .peak_bytes = allocator.tracker().peak_total(),
                                                     .note = note}));
        if (policy != LossPolicy::materialize) chunked.push_back(std::move(r));
      } catch (const std::exception& e) {
        rows.push_back(threw_row(name(variant), e.what()));
      }
    }
    const bool identical = chunked.size() == 2 && loss_head_results_identical(chunked[0], chunked[1]);
    rows.push_back(exact_row(name(kBitwiseVariant), {.mismatch = identical ? 0.0 : 1.0,
                                                     .note = "bitwise: same chunks, same products, same kernels"}));
  }
  return rows;
}

}  // namespace dflash
