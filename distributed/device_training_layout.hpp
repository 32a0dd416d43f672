// Where the CUDA training step (cuda_train_step.hpp) keeps the flat vector of TRAINING §12–§13 on
// the device, as pure host functions the CPU tests drive (tests/distributed/test_device_training_layout):
//   - the elements whose fp32 master weights and Adam moments a rank keeps: its ZeRO-1 shard
//     [r s, (r + 1) s) clipped to [0, P) (the padding is never stored), or all of [0, P) under ZeRO-0;
//   - the decay table of the AdamW kernel (matrices decay, norm weights never);
//   - the working copy: matrices in one bf16 buffer, norm weights in one fp32 buffer, each tensor
//     at its offset there, and the runs that refresh it from a range of the fp32 flat vector;
//   - the conversion between the device's fp32 parts and the host OptimizerState (double), which
//     checkpoints store, so that both backends write one format and a run resumes on either.
// The flat fp32 gradient itself has the padded size: ZeRO-1's reduce-scatter and all-gather run
// in place on it (NCCL's convention: rank r's block is [r s, (r + 1) s)), and its padding stays 0.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/flat_parameters.hpp"
#include "distributed/optimizer_state.hpp"

namespace dflash {

struct FlatRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

// The flat elements rank `rank` updates and keeps master weights and moments for.
FlatRange owned_range(const FlatLayout& layout, int rank);

// The AdamW kernel's DecayTable (cuda/optimizer/adamw_program.hpp), host side: tensor i covers
// [ends[i-1], ends[i]) and decays when decay[i] != 0.
struct HostDecayTable {
  std::vector<std::int64_t> ends;
  std::vector<unsigned char> decay;
};
HostDecayTable decay_table(const FlatLayout& layout);

// Tensor i of the working copy: a matrix (rank 2) lives in the bf16 buffer, anything else (norm
// weights) in the fp32 buffer, at `offset` elements into it.
struct WorkingSlot {
  bool matrix = false;
  std::int64_t offset = 0;
};
struct WorkingLayout {
  std::vector<WorkingSlot> slots;  // per tensor, canonical order
  std::int64_t matrix_elements = 0, vector_elements = 0;
};
WorkingLayout working_layout(const FlatLayout& layout);

// Refreshing the working copy from flat elements [begin, begin + n) held contiguously: each run
// copies `length` values from `source` (position in that span) to `target` (offset in the bf16
// buffer when `matrix`, rounded; else in the fp32 buffer). The padding is skipped.
struct WorkingCopyRun {
  bool matrix = false;
  std::int64_t source = 0, target = 0, length = 0;
  bool operator==(const WorkingCopyRun&) const = default;
};
std::vector<WorkingCopyRun> working_copy_runs(const FlatLayout& layout, const WorkingLayout& working,
                                              std::int64_t begin, std::int64_t n);

// A rank's optimizer part as the device holds it: owned_range(layout, rank).size() fp32 values each.
struct DeviceOptimizerPart {
  std::int64_t step = 0;
  std::vector<float> master, exp_avg, exp_avg_sq;
};
// From the host state (double, the rank's shard_size() with its padding): rounded to fp32.
DeviceOptimizerPart device_optimizer_part(const FlatLayout& layout, int rank, const OptimizerState& state);
// Back to the host state (exactly: fp32 values are doubles), the padding 0. InputError when the
// part's sizes are not the rank's.
OptimizerState host_optimizer_state(MemoryTracker& tracker, const FlatLayout& layout, int rank,
                                    const DeviceOptimizerPart& part);

}  // namespace dflash
