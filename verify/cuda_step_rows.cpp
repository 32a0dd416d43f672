// The whole CUDA step in the verification matrix (`dflash verify --device cuda`, group cuda):
// cuda_drafter_step on the tiny config (dropout off and on) and the mid config (dropout on; 4
// anchor slots, S = 300 so that its sliding window binds) against the double reference step
// under SPEC §10's bf16 rule (the plain bf16 computation: harness/cuda/drafter_step_twin.hpp), one
// row per trunk policy x loss policy: the error is the worst ratio, over the losses, every
// parameter's gradient (the trunk's) and dL/dF, of the CUDA error to its bound; it passes at <= 1.
// Then: every trunk policy bitwise equal (per loss policy, and the two chunked loss policies to
// each other), a second run bitwise equal, and the hidden-dropout masks (sites 2, 3) of the GPU
// bitwise equal to the CPU's. Without a usable GPU every row is SKIPPED with the reason.
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "common/dropout_site_view.hpp"
#include "cuda/drafter/step.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/runtime/device_probe.hpp"
#include "cuda/trunk/elementwise_kernels.hpp"
#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "reference/compare.hpp"
#include "verify/rows.hpp"

namespace dflash {
namespace {

struct StepRowCase {
  std::string name;
  StepProblemCase problem;
};

std::vector<StepRowCase> step_row_cases() {
  return {{"step-tiny", {"tiny.json", 11, 4, 5, 0.0}},
          {"step-tiny-dropout", {"tiny.json", 11, 4, 5, 0.1}},
          {"step-mid-dropout", {"mid.json", 300, 4, 24, 0.1}}};
}

constexpr LossPolicy kStepLossPolicies[] = {LossPolicy::chunk_recompute, LossPolicy::chunk_grad_in_forward,
                                            LossPolicy::materialize};

std::string variant_name(TrunkPolicy trunk, LossPolicy loss) {
  return std::string(trunk_policy_name(trunk)) + " x " + std::string(loss_policy_name(loss));
}

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t e = 0; e < a.size(); ++e) {
    if (!same_bits(a[e], b[e])) return false;
  }
  return true;
}

void add_case_rows(std::vector<VerifyRow>& rows, const StepRowCase& c) {
  const auto name = [&](std::string variant) {
    return RowName{.group = "cuda", .case_name = c.name, .variant = std::move(variant)};
  };
  DeviceFormatStepProblem p(load_drafter_config(drafter_config_file(c.problem.config, DFLASH_CONFIG_DIR)), c.problem);
  MemoryTracker& tracker = p.tracker;
  const DrafterConfig& config = p.config;
  const DrafterParameters<double>& params = p.params;
  const FrozenWeights<double>& frozen = p.frozen;
  const DrafterBatch<double>& batch = p.batch;
  const auto options = [&](TrunkPolicy trunk, LossPolicy loss) { return p.options(trunk, loss); };
  const DrafterStepOptions first_options = options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const StepValues exact = step_values(drafter_step(tracker, config, params, frozen, batch, first_options));
  const StepValues plain = plain_bf16_drafter_step(config, params, frozen, batch, first_options);

  DeviceAllocator allocator;
  std::vector<double> chunked;
  double differing = 0;  // runs whose bits differ from the first of their kind
  for (const LossPolicy loss : kStepLossPolicies) {
    std::vector<double> first;
    for (const TrunkPolicy trunk : kAllTrunkPolicies) {
      try {
        allocator.reset_peaks();
        const StepValues got =
            step_values(cuda_drafter_step(allocator, tracker, config, params, frozen, batch, options(trunk, loss)));
        const std::vector<RuleLine> lines = step_rule_lines(params, got, plain, exact);
        std::string note = "worst error / (2 x plain bf16 error + floor) over losses, every gradient, dL/dF";
        for (const RuleLine& l : lines) {
          if (!l.ok()) note = "FAILS: " + describe(lines);
        }
        rows.push_back(tolerance_row(name(variant_name(trunk, loss)), {.error = worst_ratio(lines),
                                                                       .tolerance = 1.0,
                                                                       .peak_bytes = allocator.tracker().peak_total(),
                                                                       .note = note}));
        const std::vector<double> bits = flattened(got);
        if (first.empty()) {
          first = bits;
        } else {
          differing += bitwise_equal(bits, first) ? 0 : 1;
        }
      } catch (const std::exception& e) {
        rows.push_back(threw_row(name(variant_name(trunk, loss)), e.what()));
        differing += 1;
      }
    }
    if (loss == LossPolicy::materialize) continue;
    if (chunked.empty()) {
      chunked = first;
    } else {
      differing += bitwise_equal(first, chunked) ? 0 : 1;
    }
  }
  rows.push_back(exact_row(name("every trunk policy; recompute = grad_in_forward"),
                           {.mismatch = differing, .note = "bitwise: runs differing from the first of their kind"}));
  try {
    const StepValues again = step_values(cuda_drafter_step(allocator, tracker, config, params, frozen, batch,
                                                           options(TrunkPolicy::none, LossPolicy::chunk_recompute)));
    rows.push_back(exact_row(name("two runs"), {.mismatch = bitwise_equal(flattened(again), chunked) ? 0.0 : 1.0,
                                                .note = "bitwise: the same step again"}));
  } catch (const std::exception& e) {
    rows.push_back(threw_row(name("two runs"), e.what()));
  }
}

// Sites 2 and 3 of a layer: the factor (0 or 1 / (1 - p)) of every element, from the residual
// dropout's backward applied to ones, against the CPU's DropoutSiteView.
VerifyRow hidden_dropout_mask_row() {
  const RowName name{.group = "cuda", .case_name = "hidden-dropout-masks", .variant = "attn + mlp residual, p 0.3"};
  try {
    DeviceAllocator allocator;
    const std::int64_t n = 4099;
    DeviceBuffer<float> ones(allocator, MemoryCategory::transient, static_cast<std::size_t>(n));
    ones.upload(std::vector<float>(static_cast<std::size_t>(n), 1.0f));
    DeviceBuffer<float> factors(allocator, MemoryCategory::transient, static_cast<std::size_t>(n));
    double mismatched = 0;
    for (const DropoutSite site : {DropoutSite::attention_residual, DropoutSite::mlp_residual}) {
      const DropoutSiteView view = dropout_site_view(20261129, 7, 3, 2, site, 0.3);
      launch_residual_dropout_backward(ones.data(), n, view, factors.data(), allocator.stream());
      const std::vector<float> got = factors.download();
      for (std::int64_t e = 0; e < n; ++e) {
        mismatched += same_bits(got[static_cast<std::size_t>(e)], view.factor(static_cast<std::uint64_t>(e))) ? 0 : 1;
      }
    }
    return exact_row(name,
                     {.mismatch = mismatched / double(2 * n), .note = "fraction of factors differing from the CPU's"});
  } catch (const std::exception& e) {
    return threw_row(name, e.what());
  }
}

}  // namespace

std::vector<VerifyRow> verify_cuda_step_rows() {
  std::vector<VerifyRow> rows;
  const CudaDeviceStatus& gpu = cuda_device_status();
  if (!gpu.available) {
    for (const StepRowCase& c : step_row_cases()) {
      for (const LossPolicy loss : kStepLossPolicies) {
        for (const TrunkPolicy trunk : kAllTrunkPolicies) {
          rows.push_back(skipped_row({.group = "cuda", .case_name = c.name, .variant = variant_name(trunk, loss)},
                                     "no GPU: " + gpu.reason));
        }
      }
      for (const char* v : {"every trunk policy; recompute = grad_in_forward", "two runs"}) {
        rows.push_back(skipped_row({.group = "cuda", .case_name = c.name, .variant = v}, "no GPU: " + gpu.reason));
      }
    }
    rows.push_back(
        skipped_row({.group = "cuda", .case_name = "hidden-dropout-masks", .variant = "attn + mlp residual, p 0.3"},
                    "no GPU: " + gpu.reason));
    return rows;
  }
  for (const StepRowCase& c : step_row_cases()) {
    try {
      add_case_rows(rows, c);
    } catch (const std::exception& e) {
      rows.push_back(threw_row({.group = "cuda", .case_name = c.name, .variant = "(setup)"}, e.what()));
    }
  }
  rows.push_back(hidden_dropout_mask_row());
  return rows;
}

}  // namespace dflash
