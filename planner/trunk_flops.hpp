// Model FLOPs of the drafter trunk for one sequence (DESIGN-NOTES, "Where the FLOPs of a full-scale
// step are"), phase by phase in the order backward runs them, so that the plan can time the backward
// the gradient reduction hides behind (gradient_overlap.hpp).
//
// A product of [m, k] by [k, n] is 2 m k n FLOPs. Per layer and sequence, forward:
//   block-token linears  2 T (H nh d + 2 H nkv d + nh d H + 3 H I)   q, k, v, o, gate, up, down
//   context k and v      2 S (2 H nkv d)
//   attention            4 T nh d keys(l): Q K^T and P V over the keys a block row sees, its block's B
//                        plus its visible context. Anchors are spread over [0, S), so a full layer
//                        sees S/2 context rows on average and a sliding one E[min(a, W)] =
//                        W - W^2 / (2 S) (W <= S; S/2 otherwise)
// and backward twice that (each product has a dX and a dW product; attention's dQ, dK, dV and dP
// are four products to forward's two), as MFU counts model FLOPs. The context path: forward
// F W_fc^T, 2 S (K H) H; backward only dW_fc, 2 S (K H) H (F is data: training needs no dF).
// Norms, RoPE, softmax and the other elementwise work are left out (a few percent at full scale);
// the achieved rate of gradient_overlap.hpp is what a whole step reaches, elementwise work included.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/drafter_config.hpp"

namespace dflash {

struct PhaseFlops {
  double forward = 0;
  double backward = 0;
};

struct TrunkFlops {
  std::vector<PhaseFlops> layers;  // [L], layer l
  PhaseFlops context;              // fc (hidden_norm's elementwise work left out)
  double forward() const;          // the whole trunk
  double backward() const;
};

// One sequence of `tokens` block tokens (T) and `context` rows (S).
TrunkFlops trunk_flops(const DrafterConfig& config, std::int64_t tokens, std::int64_t context);

}  // namespace dflash
