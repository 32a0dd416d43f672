// The host memory of one rank of `dflash train --backend cuda`, phase by phase, from the plan's
// request alone (what distributed/run/trainer.cpp and the CUDA step allocate on the host; the GPU's
// share is the device plan, training_plan.hpp). Every term is the bytes of one allocation the code
// makes, named after what it holds (S = the context, K H the feature width, T = the block tokens, N
// = T / block_size anchors, P the trainable parameters, s the rank's optimizer shard (P under
// ZeRO-0; the ZeRO-1 shard with its padding), o = min(s, P) the part of it below P):
//   optimizer_part     3 s x 8   the rank's master weights and AdamW moments in double, as the start
//                                makes them (make_optimizer_state, restore_optimizer_part)
//   checkpoint_slice   3 o x 8   a resume's read of the rank's part of the three vectors (FlatSlice)
//   part_upload        3 o x 4   the part rounded to fp32 for the device (device_optimizer_part)
//   frozen_piece       p x (8 + 2), p = min(2^20, V H): one piece of E or W_lm in double and bf16
//                                bits on its way to the device (upload_frozen_bf16)
//   step_batch         n U x S (8 + 1 + (K + 1) H x 2): the rank's sequences of one optimizer step,
//                                every micro-step's, held until the step ends (n per micro-step; S =
//                                max_context): tokens, loss mask, and F and G in bf16, rounded as they
//                                are read (FeatureDataset::sequence_bf16_batch; distributed/
//                                rank_sequences.hpp: the CUDA step reads nothing else of them)
//   upload_staging     T H x 2: the bf16 staging of a sequence's gathered teacher rows
//                                (UploadStaging), kept by the process from the first step on; F
//                                goes to the device from step_batch's bits, with no staging
//   sequence_tables    N 9 + T 41 for the sequence in flight (anchors and keep; block tokens,
//                                positions, labels, teacher rows, weights, valid) + (N + 2 T) per
//                                sequence of the step (keep, valid, hits: the block statistics)
//   checkpoint_gather  2 P x 4   on the rank that writes a checkpoint: the moments, gathered whole in
//                                fp32 (the master weights, P x 4, are written and released first)
// Phases (a phase's bytes are those it holds at once; the start's go before the first step):
//   fresh_start      optimizer_part + part_upload + frozen_piece
//   resumed_start    max(checkpoint_slice + optimizer_part, fresh_start)
//   steps            step_batch + upload_staging + sequence_tables
//   checkpoint_write upload_staging + checkpoint_gather (the lead rank, which first lets go of the
//                    step's batches the storage pool keeps between steps: trainer.cpp's save)
// What it does not count: the program, its libraries, the CUDA context and the pages of the shards it
// maps (measured as the process's base in bench/results/host_memory.md), and vectors the size of
// the tensor list.
#pragma once

#include <cstdint>
#include <optional>

#include "planner/training_plan.hpp"

namespace dflash {

struct HostMemoryPlan {
  std::int64_t optimizer_part = 0, checkpoint_slice = 0, part_upload = 0, frozen_piece = 0;
  std::int64_t step_batch = 0, upload_staging = 0, sequence_tables = 0, checkpoint_gather = 0;
  std::int64_t ranks_per_node = 1;  // min(GPUs per node, the ranks)

  std::int64_t fresh_start() const;
  std::int64_t resumed_start() const;
  std::int64_t steps() const;
  std::int64_t checkpoint_write() const;
  std::int64_t rank_peak() const;  // every rank: the larger start and the steps
  std::int64_t lead_peak() const;  // the rank that writes checkpoints: also checkpoint_write
  // The node's ranks at their peaks at once (lead_peak for one of them): an upper bound, as the
  // device plan's total is.
  std::int64_t node_peak() const;
};

inline constexpr std::int64_t kDefaultGpusPerNode = 8;

// The host plan of a CUDA training rank (production precision); nullopt at reference precision,
// whose device plan is itself the host's (`dflash train --backend cpu` computes on the host).
std::optional<HostMemoryPlan> plan_host_memory(const PlanRequest& request,
                                               std::int64_t gpus_per_node = kDefaultGpusPerNode);

}  // namespace dflash
