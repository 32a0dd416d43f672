// The loss head's shapes chosen to hit the edges, run by the GPU test (test_loss_head_gpu.cpp)
// and by the CPU backend's (test_loss_head_cpu.cpp): V and T multiples of nothing, V % 8 == 0 (the
// 16-byte path) and not, chunk 1, chunk >= T, W = 0, zero-weight and invalid rows, extreme logits,
// tau != 1, hard or soft term alone, V = 1. Every V stays <= 2^14, the range SPEC §10's floor was
// derived for.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "reference/loss_head_problem.hpp"
#include "reference/loss_head_types.hpp"

namespace dflash {

struct CudaCase {
  std::string name;
  LossHeadProblemSpec spec;
  double tau = 1.0, hard = 0.85, soft = 0.15;
  std::vector<std::int64_t> chunks;

  LossHeadOptions options(LossPolicy policy, std::int64_t chunk) const {
    return {.hard_weight = hard, .soft_weight = soft, .temperature = tau, .policy = policy, .chunk_rows = chunk};
  }
};

inline void PrintTo(const CudaCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<CudaCase> cuda_cases() {
  return {
      {"T37_H24_V301", {.rows = 37, .hidden = 24, .vocab = 301, .seed = 101}, 1.0, 0.85, 0.15, {1, 5, 37, 50}},
      {"T53_H32_V1000_aligned", {.rows = 53, .hidden = 32, .vocab = 1000, .seed = 102}, 1.0, 0.85, 0.15, {16, 64}},
      {"T29_H16_V517_tau0p5_sharp_teacher",
       {.rows = 29, .hidden = 16, .vocab = 517, .seed = 103, .teacher_scale = 2.0},
       0.5,
       0.7,
       0.3,
       {7}},
      {"T31_H16_V264_tau3_zero_weights_and_head",
       {.rows = 31, .hidden = 16, .vocab = 264, .seed = 104, .zero_weight_fraction = 0.3, .zero_lm_head_fraction = 0.3},
       3.0,
       0.85,
       0.15,
       {8, 31}},
      {"T17_H8_V203_extreme_logits",
       {.rows = 17, .hidden = 8, .vocab = 203, .seed = 105, .logit_scale = 1e4},
       0.05,
       0.85,
       0.15,
       {4}},
      {"T19_H16_V128_W0",
       {.rows = 19, .hidden = 16, .vocab = 128, .seed = 106, .all_weights_zero = true},
       1.0,
       0.85,
       0.15,
       {6}},
      {"T9_H40_V4099", {.rows = 9, .hidden = 40, .vocab = 4099, .seed = 107}, 1.0, 0.85, 0.15, {4}},
      {"T12_H64_V16384_aligned", {.rows = 12, .hidden = 64, .vocab = 16384, .seed = 108}, 1.0, 0.85, 0.15, {5}},
      {"T1_H8_V9", {.rows = 1, .hidden = 8, .vocab = 9, .seed = 109, .invalid_fraction = 0.0}, 1.0, 0.85, 0.15, {1, 4}},
      {"T5_H4_V1", {.rows = 5, .hidden = 4, .vocab = 1, .seed = 110}, 1.0, 0.85, 0.15, {2}},
      {"T64_H512_V8200_hard_only", {.rows = 64, .hidden = 512, .vocab = 8200, .seed = 111}, 1.0, 1.0, 0.0, {48}},
      {"T23_H32_V777_tau2_soft_only", {.rows = 23, .hidden = 32, .vocab = 777, .seed = 112}, 2.0, 0.0, 1.0, {10}},
  };
}

// Every run a case makes: materialize once (all rows one chunk), then each chunk under both
// chunked policies.
inline std::vector<std::pair<LossPolicy, std::int64_t>> case_runs(const CudaCase& c) {
  std::vector<std::pair<LossPolicy, std::int64_t>> runs = {{LossPolicy::materialize, c.spec.rows}};
  for (std::int64_t chunk : c.chunks) {
    runs.emplace_back(LossPolicy::chunk_recompute, chunk);
    runs.emplace_back(LossPolicy::chunk_grad_in_forward, chunk);
  }
  return runs;
}

}  // namespace dflash
