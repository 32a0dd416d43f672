// The bodies of the loss head's row kernels (loss_head_kernels.cu), as host/device functions
// phase by phase between the kernels' barriers, so that a CPU test can run them over the kernels'
// real grid and thread partition (tests/cuda/loss_head/test_loss_head_row_program.cpp): only the launch and
// the __syncthreads() between phases are device-only.
//
// Partition: one block of kRowThreads threads per row of a logits chunk. The chunk's rows are
// compact (cuda/loss_head/row_gather_program.hpp): block r computes global row i = list[r] of the valid
// rows, so every row a kernel sees is valid; the caller zeroes the others' outputs. With the
// vector path (V % 8 == 0, 16-byte aligned rows) thread j takes the 8-column groups j, j + kRowThreads, ...;
// otherwise (the scalar path) the columns j, j + kRowThreads, .... Column indices are 32-bit
// (V < 2^31, checked by the launchers); row offsets r V are 64-bit (T V exceeds 2^31).
//
// Statistics kernel:  phase 1 row_stats_thread_partial (each thread, its columns)
//                     phase 2 merge_tree_level for half = kRowThreads/2, ..., 1 (fixed tree)
//                     phase 3 write_row_outputs (thread 0)
// Gradient kernel:    one phase, logit_grad_thread (each thread, its columns, in place); its three
//                     exponentials are exp2(x log2(e)/tau - lse log2(e)), the row's lse log2(e)
//                     computed once (row_log2_offsets): one multiply and one exp2 per term
//                     instead of a subtraction and an exp. The statistics stay in natural-log units.
// Totals kernel:      totals_thread_partial, then the same fixed tree over LossHeadStats
//
// Each kernel's phases are a block program (cuda/exec/block_program.hpp) at the end of this file:
// hybrid_row_stats_program, hybrid_logit_grad_program, loss_totals_program. The kernels run them
// with DeviceBlockExec; the CPU backend (harness/cuda/host_loss_head_backend.hpp) and the tests run
// them with HostBlockExec over the same grid. The input checks' per-element rules
// (row_target_faults_of, bf16_bits_non_finite) are here too, for the same reason.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>

#include "common/bf16.hpp"
#include "common/hd.hpp"
#include "common/loss_head_stats.hpp"
#include "common/loss_row.hpp"
#include "common/row_stats.hpp"
#include "cuda/loss_head/row_gather_program.hpp"
#include "cuda/runtime/bf16_bits.hpp"

namespace dflash {

inline constexpr int kRowThreads = 256;     // one block per row; about V / 256 columns per thread
inline constexpr int kTotalsThreads = 512;  // the totals kernel: one block over all T rows

// Per-row targets on the device, indexed by global row i in [0, T).
struct DeviceRowTargets {
  const std::int64_t* labels = nullptr;  // y_i (read only where valid)
  const float* weights = nullptr;        // w_i
  const std::uint8_t* valid = nullptr;   // w01_i
};

// h, s, tau in float (narrowed from LossHeadOptions after validate_cuda_loss_head checked the range).
using HybridWeights = HybridHyper<float>;

// What the statistics pass writes for global row i (zeros where valid_i = 0).
struct DeviceRowOutputs {
  float* row_stats = nullptr;       // [T, kSavedRowStats] (common/loss_row.hpp): what backward needs
  float* lse = nullptr;             // [T]
  float* token_loss = nullptr;      // [T] h ce + s tau^2 kl
  float* ce = nullptr;              // [T]
  float* kl = nullptr;              // [T]
  std::uint8_t* correct = nullptr;  // [T] argmax z = y
};

inline constexpr float kLog2e = 1.44269504088896340736f;  // log2(e), rounded to float

// 1/tau once per kernel (a multiply per column instead of a division), log2(e)/tau for the
// gradient's exp2, and whether tau = 1 (then z/tau = z: its statistics are not accumulated twice,
// and p_tau is p).
struct RowScales {
  float tau;
  float inv_tau;
  float log2e_over_tau;
  bool tau_is_one;
};
DFLASH_HD inline RowScales row_scales(const HybridWeights& hw) {
  const float inv_tau = 1.0f / hw.tau;
  return RowScales{hw.tau, inv_tau, kLog2e * inv_tau, hw.tau == 1.0f};
}

// 2^x: exp2f on the device (one special-function instruction and a range fix), std::exp2 on the host.
DFLASH_HD inline float exp2_of(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}

// ---- eight bf16 columns in one 16-byte word group ----------------------------------------------

struct Bf16x8 {
  float v[8];
};

// Little-endian: column 2k is the low half of word k.
DFLASH_HD inline Bf16x8 widen8(const std::uint32_t (&words)[4]) {
  Bf16x8 out;
  for (int k = 0; k < 4; ++k) {
    out.v[2 * k] = float_from_bf16_bits(static_cast<Bf16Bits>(words[k] & 0xFFFFu));
    out.v[2 * k + 1] = float_from_bf16_bits(static_cast<Bf16Bits>(words[k] >> 16));
  }
  return out;
}

DFLASH_HD inline void narrow8(const Bf16x8& values, std::uint32_t (&words)[4]) {
  for (int k = 0; k < 4; ++k) {
    words[k] = static_cast<std::uint32_t>(bf16_bits_from_float(values.v[2 * k])) |
               (static_cast<std::uint32_t>(bf16_bits_from_float(values.v[2 * k + 1])) << 16);
  }
}

// One 16-byte load / store (p 16-byte aligned): a single vector instruction on the device.
DFLASH_HD inline void load8(const Bf16Bits* p, std::uint32_t (&words)[4]) {
#if defined(__CUDA_ARCH__)
  const uint4 packed = *reinterpret_cast<const uint4*>(p);
  words[0] = packed.x;
  words[1] = packed.y;
  words[2] = packed.z;
  words[3] = packed.w;
#else
  std::memcpy(words, p, sizeof words);
#endif
}

DFLASH_HD inline void store8(Bf16Bits* p, const std::uint32_t (&words)[4]) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = uint4{words[0], words[1], words[2], words[3]};
#else
  std::memcpy(p, words, sizeof words);
#endif
}

// ---- statistics kernel --------------------------------------------------------------------------

using KernelRowStats = HybridRowStats<float, std::int32_t>;

template <bool kTauIsOne>
DFLASH_HD inline void absorb_column(KernelRowStats& stats, float z, float t, std::int32_t v, std::int32_t label,
                                    const RowScales& sc) {
  if constexpr (kTauIsOne) {
    stats.update_scaled<true>(z, z, t, t, v, label);
  } else {
    stats.update_scaled<false>(z, z * sc.inv_tau, t, t * sc.inv_tau, v, label);
  }
}

template <bool kTauIsOne>
DFLASH_HD inline KernelRowStats thread_columns_stats(const Bf16Bits* zr, const Bf16Bits* tr, std::int32_t vocab,
                                                     std::int32_t label, const RowScales& sc, int thread, bool vector) {
  KernelRowStats stats;
  if (vector) {
    for (std::int32_t g = thread; g < vocab / 8; g += kRowThreads) {
      std::uint32_t zw[4], tw[4];
      load8(zr + 8 * g, zw);
      load8(tr + 8 * g, tw);
      const Bf16x8 zv = widen8(zw);
      const Bf16x8 tv = widen8(tw);
      for (int k = 0; k < 8; ++k) absorb_column<kTauIsOne>(stats, zv.v[k], tv.v[k], 8 * g + k, label, sc);
    }
  } else {
    for (std::int32_t v = thread; v < vocab; v += kRowThreads) {
      absorb_column<kTauIsOne>(stats, float_from_bf16_bits(zr[v]), float_from_bf16_bits(tr[v]), v, label, sc);
    }
  }
  return stats;
}

// Phase 1: thread `thread`'s partial statistics of one row (zr, tr: the row's V columns).
DFLASH_HD inline KernelRowStats row_stats_thread_partial(const Bf16Bits* zr, const Bf16Bits* tr, std::int32_t vocab,
                                                         std::int32_t label, const RowScales& sc, int thread,
                                                         bool vector) {
  return sc.tau_is_one ? thread_columns_stats<true>(zr, tr, vocab, label, sc, thread, vector)
                       : thread_columns_stats<false>(zr, tr, vocab, label, sc, thread, vector);
}

// Phase 2, one level of the fixed tree: thread j < half merges slot j + half into slot j. No
// slot is read and written by two threads in one level.
DFLASH_HD inline void merge_tree_level(KernelRowStats* partial, int half, int thread) {
  if (thread < half) partial[thread] = KernelRowStats::merge(partial[thread], partial[thread + half]);
}

// Phase 3 (thread 0): the merged statistics of row i become its outputs.
DFLASH_HD inline void write_row_outputs(KernelRowStats all, std::int64_t i, std::int32_t label, const HybridWeights& hw,
                                        const RowScales& sc, const DeviceRowOutputs& out) {
  if (sc.tau_is_one) all.reuse_z_for_zt();
  const HybridRowResult<float> row = finish_row(all, hw.tau);
  save_row_stats(out.row_stats, i, row);
  out.lse[i] = row.lse_z;
  out.token_loss[i] = hybrid_token_loss(row, hw);
  out.ce[i] = row.ce;
  out.kl[i] = row.kl;
  out.correct[i] = all.argmax == label ? 1 : 0;
}

// ---- gradient kernel ----------------------------------------------------------------------------

// Row i's factor w_i / W; 0 (the whole row becomes exact zeros) when invalid, weightless or W = 0.
DFLASH_HD inline float row_logit_grad_scale(const DeviceRowTargets& in, std::int64_t i, float weight_sum) {
  return in.valid[i] != 0 ? row_grad_scale(in.weights[i], weight_sum) : 0.0f;
}

// A row's saved log-partitions times log2(e), once per row: exp(x - lse) = 2^(x log2(e) - lse log2(e)).
struct RowLog2Offsets {
  float lse_z;
  float lse_zt;
  float lse_tt;
};
DFLASH_HD inline RowLog2Offsets row_log2_offsets(const HybridRowResult<float>& row) {
  return RowLog2Offsets{row.lse_z * kLog2e, row.lse_zt * kLog2e, row.lse_tt * kLog2e};
}

// dL/dz_v: p = exp(z - lse z), p_tau = exp(z/tau - lse z/tau), q = exp(t/tau - lse t/tau), each as
// one exp2 of a scaled logit less the row's offset.
DFLASH_HD inline float column_logit_grad(float z, float t, std::int32_t v, std::int32_t label, const RowLog2Offsets& m2,
                                         const HybridWeights& hw, const RowScales& sc, float scale) {
  const float p = exp2_of(z * kLog2e - m2.lse_z);
  const float p_tau = sc.tau_is_one ? p : exp2_of(z * sc.log2e_over_tau - m2.lse_zt);
  const float q = exp2_of(t * sc.log2e_over_tau - m2.lse_tt);
  return hybrid_logit_grad_of_probs(p, p_tau, q, v == label, hw.tau, hw.hard, hw.soft, scale);
}

// The one phase: thread `thread` turns its columns of row zr into dL/dz in place (tr: teacher
// logits; row: the saved statistics; scale from row_logit_grad_scale, 0 = write zeros).
DFLASH_HD inline void logit_grad_thread(Bf16Bits* zr, const Bf16Bits* tr, std::int32_t vocab, std::int32_t label,
                                        const HybridRowResult<float>& row, const HybridWeights& hw, const RowScales& sc,
                                        float scale, int thread, bool vector) {
  if (scale == 0.0f) {
    for (std::int32_t v = thread; v < vocab; v += kRowThreads) zr[v] = 0;
    return;
  }
  const RowLog2Offsets m2 = row_log2_offsets(row);
  if (vector) {
    for (std::int32_t g = thread; g < vocab / 8; g += kRowThreads) {
      std::uint32_t zw[4], tw[4];
      load8(zr + 8 * g, zw);
      load8(tr + 8 * g, tw);
      Bf16x8 zv = widen8(zw);
      const Bf16x8 tv = widen8(tw);
      for (int k = 0; k < 8; ++k) zv.v[k] = column_logit_grad(zv.v[k], tv.v[k], 8 * g + k, label, m2, hw, sc, scale);
      narrow8(zv, zw);
      store8(zr + 8 * g, zw);
    }
  } else {
    for (std::int32_t v = thread; v < vocab; v += kRowThreads) {
      zr[v] = bf16_bits_from_float(
          column_logit_grad(float_from_bf16_bits(zr[v]), float_from_bf16_bits(tr[v]), v, label, m2, hw, sc, scale));
    }
  }
}

// ---- totals kernel ------------------------------------------------------------------------------

// Thread `thread`'s rows i = thread, thread + kTotalsThreads, ... of the statistics pass's outputs,
// summed in double (not yet divided by W).
DFLASH_HD inline LossHeadStats<double> totals_thread_partial(const DeviceRowOutputs& rows_out,
                                                             const DeviceRowTargets& in, std::int64_t T, int thread) {
  LossHeadStats<double> mine;
  for (std::int64_t i = thread; i < T; i += kTotalsThreads) {
    if (in.valid[i] == 0) continue;
    const HybridRowResult<float> saved = load_row_stats(rows_out.row_stats, i);
    const HybridRowResult<double> row{saved.lse_z, saved.lse_zt, saved.lse_tt, rows_out.ce[i], rows_out.kl[i]};
    mine.add_row(in.weights[i], rows_out.token_loss[i], row, rows_out.correct[i] != 0);
  }
  return mine;
}

DFLASH_HD inline void totals_tree_level(LossHeadStats<double>* partial, int half, int thread) {
  if (thread < half) partial[thread].merge(partial[thread + half]);
}

// ---- the kernels as block programs --------------------------------------------------------------

// Whether the row kernels take the 16-byte path: V a multiple of 8 and both chunks' rows (r V
// elements in) 16-byte aligned, which their starts being 16-byte aligned then implies.
DFLASH_HD inline bool rows_take_vector_path(const Bf16Bits* z, const Bf16Bits* t, std::int64_t vocab) {
  return vocab % 8 == 0 && reinterpret_cast<std::uintptr_t>(z) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(t) % 16 == 0;
}

// Block r of the statistics kernel: compact row r of the chunks z, t (global row list[r]).
// `partial`: the block's kRowThreads shared slots.
template <class Exec>
DFLASH_HD void hybrid_row_stats_program(Exec& exec, const Bf16Bits* z, const Bf16Bits* t, std::int32_t vocab,
                                        const std::int32_t* list, const DeviceRowTargets& in, const HybridWeights& hw,
                                        const DeviceRowOutputs& out, bool vector, KernelRowStats* partial,
                                        std::int64_t r) {
  const std::int64_t i = global_row_of(list, r);
  const auto label = static_cast<std::int32_t>(in.labels[i]);
  const RowScales sc = row_scales(hw);
  const Bf16Bits* zr = z + r * vocab;
  const Bf16Bits* tr = t + r * vocab;
  exec.phase([&](int thread) {
    new (&partial[thread]) KernelRowStats(row_stats_thread_partial(zr, tr, vocab, label, sc, thread, vector));
  });
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    exec.phase([&](int thread) { merge_tree_level(partial, half, thread); });
  }
  exec.phase([&](int thread) {
    if (thread == 0) write_row_outputs(partial[0], i, label, hw, sc, out);
  });
}

// Block r of the gradient kernel: compact row r of z becomes dL/dz in place.
template <class Exec>
DFLASH_HD void hybrid_logit_grad_program(Exec& exec, Bf16Bits* z, const Bf16Bits* t, std::int32_t vocab,
                                         const std::int32_t* list, const DeviceRowTargets& in, const HybridWeights& hw,
                                         const float* row_stats, float weight_sum, bool vector, std::int64_t r) {
  const std::int64_t i = global_row_of(list, r);
  const float scale = row_logit_grad_scale(in, i, weight_sum);
  const std::int32_t label = scale == 0.0f ? -1 : static_cast<std::int32_t>(in.labels[i]);
  const HybridRowResult<float> row = scale == 0.0f ? HybridRowResult<float>{} : load_row_stats(row_stats, i);
  const RowScales sc = row_scales(hw);
  exec.phase([&](int thread) {
    logit_grad_thread(z + r * vocab, t + r * vocab, vocab, label, row, hw, sc, scale, thread, vector);
  });
}

// The totals kernel's one block of kTotalsThreads threads over all T rows; `partial`: its shared slots.
template <class Exec>
DFLASH_HD void loss_totals_program(Exec& exec, const DeviceRowOutputs& rows_out, const DeviceRowTargets& in,
                                   std::int64_t T, LossHeadStats<double>* partial, LossHeadStats<double>* totals) {
  exec.phase([&](int thread) {
    new (&partial[thread]) LossHeadStats<double>(totals_thread_partial(rows_out, in, T, thread));
  });
  for (int half = kTotalsThreads / 2; half > 0; half /= 2) {
    exec.phase([&](int thread) { totals_tree_level(partial, half, thread); });
  }
  exec.phase([&](int thread) {
    if (thread == 0) *totals = partial[0];
  });
}

// ---- input checks -----------------------------------------------------------------------------------

// The lowest offending row of each kind, or T when there is none (the device finds them with
// atomicMin over a grid-stride loop, the CPU backend in one ascending pass: the same rows).
struct RowTargetFaults {
  unsigned long long valid_not_01;        // valid_i not in {0, 1}
  unsigned long long bad_weight;          // w_i negative or not finite
  unsigned long long weight_on_invalid;   // w_i != 0 where valid_i = 0
  unsigned long long label_out_of_range;  // valid_i = 1 and y_i outside [0, V)
  unsigned long long positive_weight;     // w_i > 0 (W = 0 is then inconsistent)
};

// Which kinds of fault row i has, one flag per RowTargetFaults member, in its order.
struct RowTargetFlags {
  bool valid_not_01, bad_weight, weight_on_invalid, label_out_of_range, positive_weight;
};
DFLASH_HD inline RowTargetFlags row_target_faults_of(const DeviceRowTargets& in, std::int64_t i, std::int64_t vocab) {
  const std::uint8_t valid = in.valid[i];
  const float w = in.weights[i];
  return RowTargetFlags{valid > 1,
                        !(w >= 0.0f && w <= 3.402823466e+38f),  // negative, NaN or infinite
                        valid == 0 && w != 0.0f, valid == 1 && (in.labels[i] < 0 || in.labels[i] >= vocab), w > 0.0f};
}

// A bf16 value that is inf or NaN: every exponent bit set.
DFLASH_HD inline bool bf16_bits_non_finite(unsigned int bits16) { return (bits16 & 0x7F80u) == 0x7F80u; }

}  // namespace dflash
