// Checkpoints of a training run (TRAINING §15).
//
// <run>/step-<8 digits>/ holds
//   model.safetensors      master weights under SPEC §3 names (F64 for the reference, F32 for CUDA)
//   optimizer.safetensors  exp_avg/<name> and exp_avg_sq/<name>, same precision, full (not per rank),
//                          so a run may resume on another number of ranks
//   trainer_state.json     step (optimizer steps completed = Adam's step count), data_cursor
//                          {epoch, position}, seed, tokens_seen, the config, world_size, and the
//                          sha256 of the two files above, format and version, and the data set's
//                          fingerprint (feature_dataset.hpp)
// It is written as step-<8 digits>.tmp/ (every file flushed to disk) and renamed when complete; then
// <run>/latest (a file holding the directory's name) is replaced atomically. Every file goes through
// io/file_write.hpp (an exclusively created temporary, never a link followed, then a rename). A
// write interrupted or failed at any point leaves `latest` and the checkpoint it names intact.
// Each file's hash is computed as it is written (safetensors::Writer::write_file), not by reading
// it back. Loading verifies every hash (or one rank of a job does, for all: CheckpointHashes) and
// refuses a missing or altered file, naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/data/sequence_order.hpp"
#include "distributed/optimizer_part.hpp"
#include "io/safetensors_dtype.hpp"
#include "io/safetensors_reader.hpp"
#include "reference/drafter_config.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

inline constexpr const char* kLatestFileName = "latest";
inline constexpr const char* kModelFileName = "model.safetensors";
inline constexpr const char* kOptimizerFileName = "optimizer.safetensors";
inline constexpr const char* kTrainerStateFileName = "trainer_state.json";
inline constexpr const char* kCheckpointFormat = "dflash-checkpoint";
inline constexpr int kCheckpointVersion = 1;
// A checkpoint's directory name has 8 digits: the largest step a run can checkpoint.
inline constexpr std::int64_t kMaxCheckpointStep = 99'999'999;

struct RunCheckpoint {
  std::int64_t step = 0;  // optimizer steps completed
  DataCursor data_cursor;
  std::uint64_t seed = 0;
  std::int64_t tokens_seen = 0;
  nlohmann::json config;  // the drafter config with the training fields merged in
  int world_size = 1;
  // Flat vectors (canonical order of drafter_parameter_shapes): whole (P values each) when written;
  // read, the values [first, first + size) a FlatSlice asked for.
  std::vector<double> master, exp_avg, exp_avg_sq;
  // The vector of one optimizer part.
  std::vector<double>& flat(OptimizerPart part) {
    return part == OptimizerPart::master ? master : part == OptimizerPart::exp_avg ? exp_avg : exp_avg_sq;
  }
  const std::vector<double>& flat(OptimizerPart part) const {
    return part == OptimizerPart::master ? master : part == OptimizerPart::exp_avg ? exp_avg : exp_avg_sq;
  }
  std::int64_t first = 0;  // the flat index of master[0], exp_avg[0], exp_avg_sq[0] (at most P)
  // The data set it was trained on (distributed/data/feature_dataset.hpp's fingerprint: shard file
  // names, sizes, sequence count); null when not recorded.
  nlohmann::json data_set;
};

// "step-00000042"
std::string checkpoint_name(std::int64_t step);

// Where a write has got to; a test observer may stop the process at any of them.
enum class CheckpointPhase {
  temporary_directory_made,
  model_written,
  optimizer_written,
  state_written,
  renamed,
  latest_written
};
using CheckpointPhaseObserver = std::function<void(CheckpointPhase)>;

struct CheckpointWriteOptions {
  safetensors::Dtype precision = safetensors::Dtype::F64;  // the backend's master precision
  std::int64_t keep = 0;                                   // keep the K most recent (0: all)
  CheckpointPhaseObserver observer;
};

// Writes <run>/step-<step>/ and points `latest` at it; returns its path. `config` gives the tensor
// names and shapes. Throws std::runtime_error naming the path if the disk refuses.
std::filesystem::path write_run_checkpoint(const std::filesystem::path& run_dir, const DrafterConfig& config,
                                           const RunCheckpoint& checkpoint, const CheckpointWriteOptions& options = {});

// A checkpoint's flat vectors, one at a time: values(part) returns that part's P values.
using CheckpointValues = std::function<FlatValues(OptimizerPart)>;

// The same files from `values` instead of the checkpoint's own vectors (which must be empty):
// values is called once for each part, in kOptimizerParts' order, and the model file is written
// and master's values released before exp_avg is asked for. The writing rank then holds at most
// the two moments at once, in the backend's type: 2 P floats (13.8 GB at full scale) on a device
// backend, where the three gathered as doubles, with the fp32 vector the last came from, were
// 48.4 GB. The other ranks take part in each part's gather in the same order (the trainer's save).
std::filesystem::path write_run_checkpoint_from(const std::filesystem::path& run_dir, const DrafterConfig& config,
                                                const RunCheckpoint& counters, const CheckpointValues& values,
                                                const CheckpointWriteOptions& options = {});

// The bytes one checkpoint of `config` takes on disk at the most: its two safetensors files exactly
// (safetensors::file_size over the tensors write_run_checkpoint writes, in `precision`), and
// trainer_state.json at its read limit (kMaxTrainerStateFileBytes: a larger one could not be read
// back). For `dflash train`'s disk gate (distributed/run/disk_gate.hpp).
std::uint64_t checkpoint_bytes(const DrafterConfig& config, safetensors::Dtype precision);

// The step a checkpoint directory's name (step-<8 digits>) records.
std::int64_t checkpoint_step(const std::filesystem::path& dir);

// The directory `latest` names, or nothing when the run has no `latest`.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// The step-* directories of a run (complete ones; not *.tmp), oldest first.
std::vector<std::filesystem::path> run_checkpoints(const std::filesystem::path& run_dir);

// The values of the flat vectors a reader keeps: [first, first + count), clipped to P (count -1: to
// the end; a first past P, a shard wholly in ZeRO-1's padding, keeps none, from P). A rank that
// resumes on a device backend keeps its own optimizer part: under ZeRO-1 its shard, 3 P / R values
// instead of 3 P (36 GB less a rank at full scale on 8 ranks); under ZeRO-0 all of them. It is the
// memory and the conversion that shrink: of a tensor that overlaps the slice only the slice's
// bytes are read (flat_runs); the hashes, where this reader checks them, read both files whole.
struct FlatSlice {
  std::int64_t first = 0, count = -1;
};

// Who checks a checkpoint's two files against the hashes trainer_state.json records: the reader
// (reading both files whole), or another rank of the same job that reads the same directory. A
// resumed run's rank 0 checks them and its other ranks read only their slices: at full scale on 8
// ranks the start reads 20.8 GB for the hashes once instead of 166 GB at once from one disk. A
// rank 0 that finds a damaged file ends the job (rank_guard.hpp) before any rank has trained.
enum class CheckpointHashes { verify, verified_by_another_rank };

// A checkpoint directory opened for reading: trainer_state.json's every field (format, version,
// integers in range, step equal to the directory's name), the hashes (unless another rank checks
// them), then every tensor's name, dtype and shape against `config`, all checked before any value
// is read. Values are then read as asked, a range of one flat vector at a time, exactly (F32 or
// F64 to double). Throws dflash::InputError naming the file, the field and the value.
class RunCheckpointReader {
 public:
  static RunCheckpointReader open(const std::filesystem::path& dir, const DrafterConfig& config,
                                  CheckpointHashes hashes = CheckpointHashes::verify);
  // Every field of trainer_state.json; no flat vector.
  const RunCheckpoint& state() const { return state_; }
  // Elements [first, first + out.size()) of one flat vector (canonical order), within [0, P].
  void read(OptimizerPart part, std::int64_t first, std::span<double> out) const;

 private:
  RunCheckpointReader(RunCheckpoint state, safetensors::Reader model, safetensors::Reader optimizer,
                      std::vector<ParameterShape> shapes);
  RunCheckpoint state_;
  safetensors::Reader model_, optimizer_;
  std::vector<ParameterShape> shapes_;
  std::vector<std::int64_t> sizes_;
  std::int64_t count_;  // P
};

// The values `slice` asks for (all by default) of a checkpoint, through RunCheckpointReader.
RunCheckpoint read_run_checkpoint(const std::filesystem::path& dir, const DrafterConfig& config, FlatSlice slice = {},
                                  CheckpointHashes hashes = CheckpointHashes::verify);

// The drafter config stored in a checkpoint's trainer_state.json (for `dflash export`).
nlohmann::json checkpoint_config_json(const std::filesystem::path& dir);

}  // namespace dflash
