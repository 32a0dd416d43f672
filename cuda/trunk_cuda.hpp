// The drafter trunk of one sequence on the GPU under a trunk policy (SPEC §3, §7), the CUDA twin of
// reference/drafter_trunk.hpp:
//   C   = RMSNorm(F W_fc^T; w_hidden_norm)   once per step, shared by all layers (bf16 for the GEMMs)
//   X_0 = E[tok]                              (fp32 residual stream)
//   X_{l+1} = layer_l(X_l)                    cuda/trunk_layer_cuda.hpp
//   Y   = RMSNorm(X_L; w_norm)                (bf16: the loss head's input)
// What is kept from forward to backward, every byte counted by the DeviceAllocator:
//   saved       fc output [S,H] fp32, its rstd [S], C [S,H] bf16; X_L [T,H] fp32 and its rstd [T];
//               the layer inputs X_l [T,H] fp32 at the policy's boundaries (none: every layer,
//               per_layer: every layer, every_k: every k-th); under `none` also every layer's
//               CudaLayerActivations (CudaLayerActivations::bytes each)
//   saved during backward  one recomputed segment's activations and inner inputs (per_layer: one
//               layer's; every_k: k layers')
//   transient   each layer pass's scratch, the backward's running gradients
// A recomputed layer runs the same kernels on the same bits with the same dropout coordinates,
// so every policy gives bitwise the same gradients.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cuda/trunk_layer_cuda.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

struct CudaTrunkWeights {
  const Bf16Bits* embed_tokens = nullptr;  // E [V, H] (frozen)
  const Bf16Bits* fc = nullptr;            // [H, K H]
  const float* hidden_norm = nullptr;      // [H]
  std::vector<CudaLayerWeights> layers;
  std::vector<bool> sliding;               // per layer: sliding_attention
  const float* norm = nullptr;             // [H]
};

// fp32, accumulated (+=); target_features may be null (dL/dF not wanted).
struct CudaTrunkGrads {
  float* fc = nullptr;
  float* hidden_norm = nullptr;
  std::vector<CudaLayerGrads> layers;
  float* norm = nullptr;
  float* target_features = nullptr;  // [S, K H]
};

class CudaTrunk {
 public:
  // `ctx` holds the sequence's device inputs (anchors, keep, positions, dropout coordinates);
  // its `context` is set by the trunk. features F [S, K H] bf16 and tokens [T] (tok(n,k), < V)
  // must outlive backward.
  CudaTrunk(DeviceAllocator& allocator, LinearGemm& gemm, const CudaTrunkWeights& weights, CudaLayerContext ctx,
            std::int64_t K, const Bf16Bits* features, const std::int64_t* tokens, TrunkPolicy policy,
            std::int64_t checkpoint_every);

  // Y [T, H] bf16 (transient; the caller hands it to the loss head). Keeps what the policy keeps.
  DeviceBuffer<Bf16Bits> forward();
  // Takes dL/dY [T, H] fp32 (consumed); accumulates every trainable gradient; frees what forward kept.
  void backward(DeviceBuffer<float> d_hidden, const CudaTrunkGrads& grads);

 private:
  bool is_boundary(std::int64_t l) const { return policy_ == TrunkPolicy::none || l % segment_ == 0; }
  void recompute_segment(std::int64_t start, std::int64_t end);

  DeviceAllocator& allocator_;
  LinearGemm& gemm_;
  const CudaTrunkWeights& w_;
  CudaLayerContext ctx_;
  std::int64_t K_;
  const Bf16Bits* features_;
  const std::int64_t* tokens_;
  TrunkPolicy policy_;
  std::int64_t segment_;
  DeviceBuffer<float> fc_out_, hidden_rstd_;
  DeviceBuffer<Bf16Bits> context_;
  std::vector<DeviceBuffer<float>> inputs_;                       // X_l where kept
  std::vector<std::optional<CudaLayerActivations>> layers_;       // none: all; else the live segment
  DeviceBuffer<float> final_input_, final_rstd_;
};

}  // namespace dflash
