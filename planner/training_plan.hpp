// The memory plan of one training step on one GPU (SPEC §7, §8): for a drafter config, the block
// tokens and context length of the sequence a GPU trains on, the two policies, the element sizes
// and the parallel layout, the bytes of every category, their total and whether it fits a device.
//
// By default one sequence per GPU per micro-step (SPEC §1: T = 32768 block tokens per GPU is one
// sequence of 1024 anchors of 32). A step runs its sequences one after another (reference/drafter.hpp:
// trunk forward, loss head forward and backward, trunk backward), so more sequences add only to the
// batch-wide tensors (inputs, outputs, dL/dF). Per category, as reference/drafter.hpp allocates:
//   parameters, frozen, master_weights, optimizer_state, communication   parameter_memory.hpp
//   gradients   parameter gradients + the loss head's gradients (dL/dY [T, H]); with
//               features_grad, also dL/dF of the batch [n, S, K H], and one sequence's dL/dF
//               counted in place of dL/dY when larger (it is made after dL/dY is freed)
//   inputs      per sequence of all U micro-steps: token ids (8 B) and loss mask (1 B) [S], F [S, K H] and G [S, H] at
//               input precision, anchor slots and keep flags [N] (8 + 1 B); plus one sequence's
//               teacher rows gathered for the loss head [T, H]
//   saved       the trunk's (trunk_plan.hpp); loss_saved the loss head's (loss_head_memory.hpp)
//   transient   the larger of the trunk's scratch and, while the loss head runs, Y [T, H] plus the
//               loss head's scratch
//   outputs     per sequence: anchors and keep [N], Y [T, H], lse, token loss and weights [T]; plus
//               the loss head's lse and token loss [T] of the sequence in flight
// With the CUDA trunk (precision.trunk, the production default), the categories follow
// cuda_drafter_step (cuda/drafter/step.cpp), which keeps the batch on the host and runs one
// sequence at a time: gradients = parameter gradients + the loss head's dL/dY (+ one sequence's
// fp32 dL/dF with features_grad); inputs = what it uploads for one sequence (training_plan.cpp); outputs = the loss
// head's; saved and transient the CUDA trunk's (planner/cuda_trunk_memory.hpp); the loss head's
// categories cuda_loss_head_memory's (no chunk_retain: InputError naming loss_policy).
// The total adds every category's own peak: an upper bound of the true peak, whose slack is what
// two phases never hold at once (the loss head's scratch and the trunk's backward, say).
#pragma once

#include <cstdint>

#include "planner/activation_memory.hpp"
#include "planner/device_fit.hpp"
#include "planner/loss_head_memory.hpp"
#include "planner/parallel_layout.hpp"
#include "planner/parameter_memory.hpp"
#include "planner/plan_category.hpp"
#include "planner/training_precision.hpp"
#include "planner/trunk_plan.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {

// Default context length S: 4096 (planner/README.md gives the reasons). At full scale the
// verdicts are the same for every S up to 23,265: the context-sized tensors (F, G, C, the
// context keys and values) are small next to the T-sized ones.
inline constexpr std::int64_t kDefaultContextLength = 4096;
inline constexpr std::int64_t kDefaultDeviceBytes = 95'000'000'000;  // 95 GB (SPEC §1)

struct PlanRequest {
  DrafterConfig config;
  std::int64_t tokens = 0;                       // T block tokens per GPU, a multiple of block_size
  std::int64_t context = kDefaultContextLength;  // S
  std::int64_t sequences = 1;    // sequences per GPU per micro-step, each with T block tokens and S context
  std::int64_t micro_steps = 1;  // U: a training step holds the inputs of all its U micro-steps (W first, TRAINING §11)
  LossPolicy loss_policy = LossPolicy::chunk_recompute;
  std::int64_t loss_chunk_rows = 2048;
  TrunkPolicy trunk_policy = TrunkPolicy::per_layer;
  std::int64_t checkpoint_every = 1;
  bool lm_head_grad = false;  // the head is frozen (SPEC §2)
  // Whether the step makes dL/dF. The target's features are inputs (TRAINING §14): the CUDA
  // training step (distributed/cuda/train_step.hpp) never makes it. The steps that hand it back
  // (drafter_step, cuda_drafter_step: verification, goldens) and the reference training step
  // (drafter_step_accumulate makes and frees it) do.
  bool features_grad = false;
  TrainingPrecision precision = TrainingPrecision::production();
  ParallelLayout layout;
  std::int64_t device_bytes = kDefaultDeviceBytes;

  // The config's training fields (policies, chunk rows, checkpoint interval) and its full block
  // count (T = block_size x max_anchors); everything else at the defaults above.
  static PlanRequest from_config(const DrafterConfig& config);
};

// Throws InputError naming the field (tokens, context, sequences, loss_chunk_rows, checkpoint_every, gpus, ...).
void validate_plan_request(const PlanRequest& request);

struct MemoryPlan {
  PlanRequest request;
  ParameterCounts parameters;
  LossHeadShape loss_head_shape;
  LossHeadHeadline loss_head;  // SPEC §8's headline numbers
  TrunkPlan trunk;
  ActivationMemory activations;  // the trunk summary (trunk_activation_summary)
  CategoryBytes categories;
  DeviceFit fit;
};

MemoryPlan plan_training_memory(const PlanRequest& request);

}  // namespace dflash
