// What the drafter trunk keeps from forward to backward, per trunk policy: the exact tensors the
// reference allocates in MemoryCategory::saved, for the memory planner to predict from the config
// alone. Sizes in elements (the reference stores each as one Real; bytes = elements x sizeof).
// One sequence at a time: a batch's sequences run one after another, so the peak is one
// sequence's. dims: S context, T = N B block rows, H, I, nh, nkv, d, K, L.
//
// Kept by every policy, for the whole step (forward to the end of the trunk backward):
//   context.fc_out            [S, H]      F W_fc^T: input of hidden_norm
//   context.hidden_norm_rstd  [S]
//   context                   [S, H]      C, read by every layer's k/v projections
// Kept from the end of forward until the final norm's backward (first thing backward does):
//   final.input               [T, H]      X_L: input of the final norm
//   final.rstd                [T]
// Layer boundaries (the input X_l [T, H] of layer l):
//   none       X_0 .. X_{L-1}, all kept
//   per_layer  X_0 .. X_{L-1}, all kept; X_l freed when layer l's backward is done
//   every_k    X_l for l = 0, k, 2k, ... (segment starts); freed when its segment's backward is done
// Layer activations (layers.{l}.*, reference/drafter_layer.hpp, 21 tensors):
//   input_rstd [T], u [T,H], q_proj [T,nh d], q_rstd [T,nh], q [T,nh d],
//   k_ctx_proj [S,nkv d], k_ctx_rstd [S,nkv], k_ctx [S,nkv d], v_ctx [S,nkv d],
//   k_blk_proj [T,nkv d], k_blk_rstd [T,nkv], k_blk [T,nkv d], v_blk [T,nkv d],
//   attn_lse [T,nh], attn_out [T,nh d], x_mid [T,H], post_rstd [T], v [T,H],
//   gate [T,I], up [T,I], act [T,I]
//   none       every layer's, from its forward to its backward
//   per_layer  one layer's at a time, rebuilt at the start of its backward (the live layer)
//   every_k    one segment's at a time: its layers' activations plus the inputs of its layers
//              after the first, rebuilt at the start of the segment's backward (the live segment)
// Dropout masks are never kept (regenerated from their Philox coordinates). Scratch that lives
// within one layer's forward or backward (RoPE tables, score rows, projections before the
// residual add, gradients) is MemoryCategory::transient; the loss head's state is loss_saved.
//
// Peak (elements), with ctx = 2SH + S, fin = TH + T, A = one layer's activations, seg_j = the
// layers of segment j (segments of k layers, the last one shorter):
//   none       ctx + L TH + L A + fin                     (end of forward)
//   per_layer  ctx + L TH + max(fin, A)                   (= every_k with k = 1)
//   every_k    max(ctx + #segments TH + fin,
//                  max_j ctx + (j+1) TH + |seg_j| A + (|seg_j| - 1) TH)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/drafter_dims.hpp"
#include "reference/tensor.hpp"
#include "reference/trunk_policy.hpp"

namespace dflash {

struct SavedTensor {
  std::string name;  // "context", "layers.3.gate", "layers.3.input", "final.input", ...
  Shape shape;
  std::int64_t elements() const { return shape_numel(shape); }
};

struct TrunkSavedPlan {
  std::vector<SavedTensor> kept;          // kept from forward (context, boundaries, final; none: all activations)
  std::vector<SavedTensor> largest_live;  // rebuilt in backward: the largest live segment (empty for none)
  std::int64_t peak_elements = 0;         // the saved-category peak of one sequence
};

// The 21 activations of layer `layer` (names prefixed "layers.{layer}.").
std::vector<SavedTensor> layer_activation_tensors(const DrafterDims& dims, std::int64_t layer);

// Everything a policy keeps, and its peak, for one sequence of S context rows and N anchor slots.
TrunkSavedPlan trunk_saved_plan(const DrafterDims& dims, TrunkPolicy policy, std::int64_t checkpoint_every);

}  // namespace dflash
