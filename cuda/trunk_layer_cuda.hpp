// One drafter layer of one sequence on the GPU (SPEC §3), forward and backward, the CUDA twin of
// reference/drafter_layer.hpp: the projections on cuBLAS (cuda/linear_gemm.hpp), the DFlash
// attention kernels (cuda/attention_kernels.hpp) and the elementwise kernels
// (cuda/trunk_elementwise_kernels.hpp), in the reference's order.
//
// Formats: the residual stream X, X' and every gradient are fp32; what feeds a GEMM or the
// attention kernels is bf16 (u, v, act, q, k, v rows, O, the context C); projection outputs that
// a norm reads back in backward (q/k projections) are fp32; row statistics are fp32. A gradient
// that feeds a GEMM is rounded to bf16 first (launch_narrow); weight gradients accumulate in fp32.
#pragma once

#include <cstdint>

#include "cuda/bf16_bits.hpp"
#include "cuda/device_allocator.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/linear_gemm.hpp"
#include "reference/drafter_dims.hpp"

namespace dflash {

// One layer's weights on the device: bf16 matrices [out, in], fp32 norm weights.
struct CudaLayerWeights {
  const Bf16Bits *q_proj, *k_proj, *v_proj, *o_proj, *gate_proj, *up_proj, *down_proj;
  const float *input_layernorm, *q_norm, *k_norm, *post_attention_layernorm;
};

// One layer's parameter gradients, fp32, accumulated (+=).
struct CudaLayerGrads {
  float *q_proj, *k_proj, *v_proj, *o_proj, *gate_proj, *up_proj, *down_proj;
  float *input_layernorm, *q_norm, *k_norm, *post_attention_layernorm;
};

// What every layer of one sequence reads besides its weights and input (device pointers).
struct CudaLayerContext {
  DrafterDims dims;
  float eps = 1e-6f;
  double rope_theta = 10000.0;
  std::int64_t sliding_window = 0;
  std::int64_t key_tile = 32;                    // context keys per attention tile
  const Bf16Bits* context = nullptr;             // C [S, H]
  const std::int64_t* anchors = nullptr;         // [N]
  const std::uint8_t* keep = nullptr;            // [N]
  const std::int64_t* block_positions = nullptr;    // [T] a_n + k
  const std::int64_t* context_positions = nullptr;  // [S] j
  std::uint64_t seed = 0;
  std::uint32_t step = 0, sequence = 0;          // GLOBAL sequence index (SPEC §6)
  double attention_dropout = 0, hidden_dropout = 0;
};

// One layer's intermediates from forward to backward (reference/drafter_layer.hpp's list, in
// the formats above), all under one category.
struct CudaLayerActivations {
  DeviceBuffer<float> input_rstd;  // [T]
  DeviceBuffer<Bf16Bits> u;        // [T, H]
  DeviceBuffer<float> q_proj;      // [T, nh d]
  DeviceBuffer<float> q_rstd;      // [T, nh]
  DeviceBuffer<Bf16Bits> q;        // [T, nh d]
  DeviceBuffer<float> k_ctx_proj;  // [S, nkv d]
  DeviceBuffer<float> k_ctx_rstd;  // [S, nkv]
  DeviceBuffer<Bf16Bits> k_ctx;    // [S, nkv d]
  DeviceBuffer<Bf16Bits> v_ctx;    // [S, nkv d]
  DeviceBuffer<float> k_blk_proj;  // [T, nkv d]
  DeviceBuffer<float> k_blk_rstd;  // [T, nkv]
  DeviceBuffer<Bf16Bits> k_blk;    // [T, nkv d]
  DeviceBuffer<Bf16Bits> v_blk;    // [T, nkv d]
  DeviceBuffer<float> attn_lse;    // [T, nh]
  DeviceBuffer<Bf16Bits> attn_out; // [T, nh d]
  DeviceBuffer<float> x_mid;       // [T, H]
  DeviceBuffer<float> post_rstd;   // [T]
  DeviceBuffer<Bf16Bits> v;        // [T, H]
  DeviceBuffer<Bf16Bits> gate;     // [T, I]
  DeviceBuffer<Bf16Bits> up;       // [T, I]
  DeviceBuffer<Bf16Bits> act;      // [T, I]

  CudaLayerActivations(DeviceAllocator& a, const DrafterDims& m, MemoryCategory c);
  // Bytes per layer (what the memory plan counts for these formats).
  static std::size_t bytes(const DrafterDims& m);
};

// X [T, H] fp32 in, X'' [T, H] fp32 out (transient); fills `a`. `sliding`: the layer's type.
DeviceBuffer<float> cuda_layer_forward(DeviceAllocator& allocator, LinearGemm& gemm, const CudaLayerContext& ctx,
                                       std::int64_t layer, bool sliding, const CudaLayerWeights& w, const float* x,
                                       CudaLayerActivations& a);

// Takes dL/dX'' (consumed) and returns dL/dX (transient); accumulates the layer's parameter
// gradients into `g` and dL/dC into d_context [S, H] (fp32).
DeviceBuffer<float> cuda_layer_backward(DeviceAllocator& allocator, LinearGemm& gemm, const CudaLayerContext& ctx,
                                        std::int64_t layer, bool sliding, const CudaLayerWeights& w, const float* x,
                                        const CudaLayerActivations& a, DeviceBuffer<float> d_out,
                                        const CudaLayerGrads& g, float* d_context);

}  // namespace dflash
