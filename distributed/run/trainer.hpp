// `dflash train`: the full-scale training entry point (TRAINING §11–§17, SPEC §1), one process per
// rank. In order, before anything is written:
//   1. the config (drafter model + SPEC §1 training fields + TRAINING §12 fields, one file);
//   2. the plan gate (plan_gate.hpp): printed, and a refusal with the table unless --force;
//   3. the output directory: one holding another run's checkpoints needs --resume;
//   4. the feature set, every shard validated: every rank checks every header, rank r reads the
//      values of shards r, r + R, ... (ShardValueCheck), then all meet at a barrier;
//   5. the initial weights (--init, or the seeded initialisation, or the latest checkpoint with
//      --resume, its hashes verified: a CUDA rank reads its own optimizer part of it and keeps no
//      parameters), then the step backend, which reads the frozen weights from the target
//      checkpoint (whole for the reference; a piece at a time into a device backend's bf16 copy,
//      so that a CUDA rank never holds them on the host), after which the storage pool's cached
//      blocks, which only the start needed, are freed.
// Then each optimizer step takes the next global batch from the data cursor, runs train_step on
// this rank's share, appends its metrics (rank 0), and saves a checkpoint every --save-every steps,
// at the end, and after SIGINT/SIGTERM (then exits 0).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "distributed/communicator.hpp"
#include "distributed/run/plan_gate.hpp"
#include "distributed/run/step_backend.hpp"

namespace dflash {

struct TrainingRunOptions {
  std::filesystem::path config, data, target, out;
  std::optional<std::filesystem::path> init;
  TrainingBackend backend = TrainingBackend::cpu;
  bool resume = false;
  bool force = false;                              // train even when the plan says it does not fit
  bool allow_other_data = false;                   // --resume on a data set other than the checkpoint's
  std::int64_t save_every = 0;                     // also every N steps (0: only at the end and on a signal)
  std::int64_t keep = 0;                           // keep the K most recent checkpoints (0: all)
  std::int64_t progress_every = 10;                // progress lines when stderr is not a terminal
  std::optional<std::filesystem::path> eval_data;  // held-out shards (evaluation.hpp)
  std::int64_t eval_every = 0;                     // evaluate after every N-th step (with eval_data)
  // Called on every rank after step t's metrics are known (tests: raise a signal mid-run).
  std::function<void(std::int64_t step)> after_step;
  // Called on every rank once the step backend is made and the start's host memory freed (tests).
  std::function<void()> after_start;
  // Tests: the bytes available on --out's filesystem, in place of available_disk_bytes (disk_gate.hpp).
  std::function<std::uint64_t(const std::filesystem::path&)> available_disk_bytes;
  // Tests: the GPU memory the plan gate of --backend cuda holds the step to, in place of
  // cuda_device_bytes (cuda_step_backend.hpp): the ranks' GPUs, which a test has not.
  std::function<std::optional<std::int64_t>(Communicator&)> device_bytes;
  // Tests: makes the step backend in place of the one `backend` names, from the same inputs (the
  // plan, the checks and the checkpoints stay `backend`'s): the CUDA step's code on the CPU's
  // training backend (harness/cuda/host_training_backend.hpp). With --backend cuda the state has no
  // parameters, only this rank's optimizer part (what a device backend reads); the frozen
  // weights are the target's, opened and checked but not read (TargetWeights): the backend reads
  // them while it is made, whole (the reference) or a piece at a time (a device backend).
  std::function<std::unique_ptr<StepBackend>(Communicator&, const DrafterConfig&, const TrainingConfig&,
                                             const FrozenWeightSource&, TrainingState)>
      make_step_backend;
};

// Runs the whole thing on this rank; returns the exit code (0: finished, or stopped by a signal
// after saving). Bad input throws dflash::InputError before anything is written.
int run_training(const TrainingRunOptions& options, Communicator& comm, std::ostream& log);

}  // namespace dflash
