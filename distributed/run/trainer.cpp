#include "distributed/run/trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

#include "distributed/checkpoint/save_restore.hpp"
#include "distributed/cuda/stream_wait.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/data/sequence_order.hpp"
#include "distributed/flat_parameters.hpp"
#include "distributed/metrics/block_statistics.hpp"
#include "distributed/metrics/step_record.hpp"
#include "distributed/metrics/svg_report.hpp"
#include "distributed/optimizer_state.hpp"
#include "distributed/rank_sequences.hpp"
#include "distributed/run/cuda_step_backend.hpp"
#include "distributed/run/disk_gate.hpp"
#include "distributed/run/evaluation.hpp"
#include "distributed/run/step_backend.hpp"
#include "distributed/run/stop_signal.hpp"
#include "distributed/train_step.hpp"
#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "distributed/weights/target_tensors.hpp"
#include "io/errors.hpp"
#include "io/file_write.hpp"
#include "io/json_fields.hpp"
#include "planner/memory_size.hpp"
#include "reference/storage_pool.hpp"

namespace dflash {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kRunTargetDepthKey = "num_target_layers";

// The drafter config with the training fields merged in: what a checkpoint records; with
// `released`, the --init directory's config.json verbatim under kInitConfigKey, so that an export
// keeps the keys this project does not model.
json run_config_json(const DrafterConfig& config, const TrainingConfig& training, const json* released) {
  json j = drafter_config_to_json(config);
  j.update(training_config_to_json(training));
  if (released != nullptr) j[kInitConfigKey] = *released;
  return j;
}

// The drafter config with the target's depth (TRAINING §16's num_target_layers) from --target,
// --config and --init, checked against every target_layer_id.
DrafterConfig config_with_target_depth(DrafterConfig config, const TrainingRunOptions& o,
                                       const std::optional<json>& released) {
  std::optional<DrafterConfig> init;
  if (released) init = drafter_config_from_json(*released, (*o.init / "config.json").string());
  const std::string init_source = o.init ? (*o.init / "config.json").string() : std::string();
  config.num_target_layers =
      resolve_target_depth({config, o.config.string(), o.target, init ? &*init : nullptr, init_source});
  validate_drafter_config(config, o.config.string());
  return config;
}

// The --init directory's config.json, when a fresh run starts from one that has it (import_drafter
// names every other problem with the directory).
std::optional<json> released_config(const TrainingRunOptions& o) {
  std::error_code ec;
  if (o.resume || !o.init || !fs::is_regular_file(*o.init / "config.json", ec)) return std::nullopt;
  return read_json_file(*o.init / "config.json");
}

// A resumed run must be the same run: every field of the checkpoint's config must match.
void require_same_run_config(const json& stored, const json& current, const fs::path& checkpoint) {
  for (const auto& [key, value] : current.items()) {
    // Checkpoints written before runs recorded the target's depth do not hold it.
    if (key == kRunTargetDepthKey && !stored.contains(key)) continue;
    if (!stored.contains(key) || stored.at(key) != value) {
      throw_input_error(
          key, str("--config has ", value.dump(), " but the checkpoint ", checkpoint.string(), " was written with ",
                   stored.contains(key) ? stored.at(key).dump() : std::string("no value"),
                   " (a resumed run continues the same run; start a new --out to change it)"));
    }
  }
}

// A run that starts at step 0 writes metrics.jsonl, eval.jsonl and step-* afresh: refused where
// another run left them without a `latest` to resume from (--resume must never be less safe than
// no --resume: it used to start over and replace them).
void require_nothing_to_overwrite(const fs::path& out) {
  const std::vector<fs::path> existing = run_checkpoints(out);
  if (!existing.empty()) {
    throw_input_error("--resume",
                      str("'", out.string(), "' holds checkpoints (", existing.back().filename().string(), ") but no '",
                          kLatestFileName, "' naming the one to resume from; write its name into ",
                          (out / kLatestFileName).string(), " or choose another --out"));
  }
  for (const char* name : {"metrics.jsonl", "eval.jsonl"}) {
    std::error_code ec;
    const fs::path path = out / name;
    if (fs::exists(fs::symlink_status(path, ec)) && !(fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0)) {
      throw_input_error("--out", str("'", path.string(), "' holds another run's records and there is no checkpoint to ",
                                     "resume from; move it away or choose another --out"));
    }
  }
}

// The data set a resumed run trains on must be the checkpoint's (TRAINING §15: the cursor indexes
// its order), unless --allow-other-data says the change is meant.
void require_same_data_set(const json& stored, const json& current, const fs::path& checkpoint, bool allowed) {
  if (allowed || stored == current) return;
  throw_input_error("--data",
                    str("the set has fingerprint ", current.dump(), " but the checkpoint ", checkpoint.string(),
                        " was trained on ", stored.is_null() ? std::string("a set it does not record") : stored.dump(),
                        " (shard names, sizes, sequences); pass --allow-other-data to resume on it anyway"));
}

// Refuses an --out that holds another run unless resuming.
void check_output_directory(const fs::path& out, bool resume) {
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    throw_input_error("--out", str("'", out.string(), "' exists and is not a directory"));
  }
  if (resume) return;
  const std::optional<fs::path> latest = fs::exists(out / kLatestFileName, ec) ? latest_checkpoint(out) : std::nullopt;
  const std::vector<fs::path> existing = run_checkpoints(out);
  if (latest || !existing.empty()) {
    throw_input_error("--out",
                      str("'", out.string(), "' already holds another run's checkpoints (",
                          latest ? "latest: " + latest->filename().string() : existing.back().filename().string(),
                          "); pass --resume to continue that run, or choose another --out"));
  }
}

DrafterParameters<double> unflatten(MemoryTracker& tracker, const DrafterConfig& config, const FlatLayout& layout,
                                    const std::vector<double>& flat) {
  DrafterParameters<double> p = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
  write_flat(layout, p, 0, flat);
  return p;
}

void barrier(Communicator& comm) {
  std::int64_t token = 0;
  comm.all_reduce(&token, &token, 1, CommType::i64, CommOp::sum);
}

}  // namespace

int run_training(const TrainingRunOptions& o, Communicator& comm, std::ostream& log) {
  const int rank = comm.rank(), R = comm.size();
  const bool lead = rank == 0;
  if (o.save_every < 0) throw_input_error("--save-every", str(o.save_every, " must be >= 0"));
  if (o.keep < 0) throw_input_error("--keep", str(o.keep, " must be >= 0"));
  if (o.eval_data.has_value() != (o.eval_every > 0)) {
    throw_input_error(o.eval_data ? "--eval-every" : "--eval-data",
                      str("give both --eval-data DIR and --eval-every N >= 1 (got --eval-every ", o.eval_every, ")"));
  }

  // The NCCL wait's limit (distributed/cuda/stream_wait.hpp), read again by the communicator: a
  // bad value is refused here, before the data scan and the checkpoint read, not after them.
  if (o.backend == TrainingBackend::cuda) nccl_timeout_seconds(std::getenv(kNcclTimeoutVariable));

  // 1. Config.
  const std::optional<json> released = released_config(o);
  const DrafterConfig config = config_with_target_depth(load_drafter_config(o.config), o, released);
  const TrainingConfig training = load_training_config(o.config);
  require_same_config(comm, config, training);
  json config_json = run_config_json(config, training, released ? &*released : nullptr);

  // 2. Plan gate: with --backend cuda against the ranks' smallest GPU (95 GB where none is found).
  std::optional<std::int64_t> gpu_bytes;
  if (o.backend == TrainingBackend::cuda) gpu_bytes = o.device_bytes ? o.device_bytes(comm) : cuda_device_bytes(comm);
  // The hosts as every rank sees them: the most ranks a node holds and the smallest share of a
  // host's memory a rank gets (nodes may differ), so that all give one verdict.
  RankHosts hosts{comm.node_ranks(), host_memory_bytes_per_rank(comm.node_ranks())};
  comm.all_reduce(&hosts.ranks_on_node, &hosts.ranks_on_node, 1, CommType::i64, CommOp::max);
  comm.all_reduce(&hosts.bytes_per_rank, &hosts.bytes_per_rank, 1, CommType::i64, CommOp::min);
  const PlanVerdict verdict = plan_verdict(config, training, R, o.backend, hosts, gpu_bytes);
  if (lead && o.backend == TrainingBackend::cuda) {
    log << "dflash train: GPU memory per rank "
        << (gpu_bytes ? gb_string(std::uint64_t(*gpu_bytes)) + " (the smallest of the ranks' GPUs)"
                      : std::string("unknown (no GPU found): the plan holds the step to SPEC §1's 95 GB"))
        << "\n";
  }
  if (lead) print_plan_verdict(log, verdict, o.config.string(), R, o.backend);
  if (!verdict.fits() && !o.force) {
    throw_input_error("plan", str(verdict.device_fits() ? "the host memory of a rank" : "the training step",
                                  " does not fit on ", R, " rank(s) with backend ", training_backend_name(o.backend),
                                  " (table above); change the config or the ranks, "
                                  "or pass --force to try anyway"));
  }
  // (A test's own step backend needs no GPU.)
  if (o.backend == TrainingBackend::cuda && !o.make_step_backend) require_cuda_training_available(comm);

  // 3. Output directory.
  check_output_directory(o.out, o.resume);
  const std::optional<fs::path> resume_from = o.resume ? latest_checkpoint(o.out) : std::nullopt;
  if (!resume_from) require_nothing_to_overwrite(o.out);

  // 3b. Disk gate: the checkpoints the run will add against the space on --out's filesystem, asked
  // by the rank that writes them and given to every rank, so that all refuse or none.
  const std::int64_t first_step = resume_from ? checkpoint_step(*resume_from) : 0;
  DiskPlan disk{checkpoint_bytes(config, master_dtype_of(o.backend)),
                checkpoints_added_at_most(first_step, training.total_steps, o.save_every, o.keep,
                                          std::int64_t(run_checkpoints(o.out).size())),
                0,
                record_lines_added_at_most(first_step, training.total_steps, o.eval_every,
                                           step_record_line_bytes_at_most(config.block_size),
                                           eval_record_line_bytes_at_most(config.block_size))};
  std::int64_t available = 0;
  if (lead) {
    const std::uint64_t bytes = o.available_disk_bytes ? o.available_disk_bytes(o.out) : available_disk_bytes(o.out);
    available = std::int64_t(std::min<std::uint64_t>(bytes, std::numeric_limits<std::int64_t>::max()));
  }
  comm.all_reduce(&available, &available, 1, CommType::i64, CommOp::max);
  disk.available = std::uint64_t(available);
  if (lead) print_disk_plan(log, disk, o.out, o.keep);
  if (!o.force) require_disk_plan_fits(disk, o.out, o.keep);

  // 4. Data: every rank checks every shard's header; the values are read once, rank r taking
  // every R-th shard from shard r. A rank that finds a bad value fails the job (run_guarded) while
  // the others wait at the barrier, before anything is written.
  const FeatureSetShape shape = FeatureSetShape::of(config);
  const ShardValueCheck my_shards{rank, R};
  const FeatureDataset dataset = FeatureDataset::open(o.data, shape, my_shards);
  std::optional<FeatureDataset> eval_set;
  if (o.eval_data) {
    eval_set.emplace(FeatureDataset::open(*o.eval_data, shape, my_shards));
    validate_eval_set(*eval_set);
  }
  {
    // Shards are dealt by index, not size, and ranks read at their file system's pace: the fastest
    // waits here for the difference of whole scans, which grows with the data (hours at 10 TB), so
    // this wait has no limit (DFLASH_MPI_TIMEOUT_S).
    const WaitLimitLifted scan_of_unknown_length(comm);
    barrier(comm);  // every rank's share of the scan done
  }
  if (lead) {
    log << "dflash train: data " << o.data.string() << ": " << dataset.num_shards() << " shard(s), "
        << dataset.num_sequences() << " sequences, " << dataset.num_rows() << " rows, validated\n";
  }

  // 5. Weights: the run's state, then the backend, which reads the frozen weights. A CUDA rank keeps
  // only its own part of the optimizer and makes its working copy from the master weights on the
  // device: on a resume it reads that part of the checkpoint (under ZeRO-1 its shard, 3 P / R
  // values), where the reference, which computes with the whole parameters, reads 3 P (41 GB a rank
  // at full scale) and unflattens P of them; on a fresh start it draws the seeded values of its part
  // alone (seeded_flat_values) or reads that part of --init's weights (DrafterWeightsReader), where
  // the reference makes all P (14 GB). The backend then gets no parameters
  // (TrainingRunOptions::make_step_backend), and reads the target's E and W_lm a piece at a time
  // into its bf16 copy: the host never holds their 2 V H doubles (20 GB), which the reference
  // backend reads whole and keeps.
  MemoryTracker tracker;
  const FlatLayout flat(config, R, training.zero_stage);
  const bool own_part_only = o.backend == TrainingBackend::cuda;
  TrainingState state;
  DataCursor cursor;
  std::int64_t tokens_seen = 0;
  std::string last_good = "none";
  if (resume_from) {
    // Rank 0 checks the files' hashes; the others read only what they keep.
    const RunCheckpoint ck = read_run_checkpoint(
        *resume_from, config, own_part_only ? FlatSlice{flat.shard_offset(rank), flat.shard_size()} : FlatSlice{},
        lead ? CheckpointHashes::verify : CheckpointHashes::verified_by_another_rank);
    require_same_run_config(ck.config, config_json, *resume_from);
    require_same_data_set(ck.data_set, dataset.fingerprint(), *resume_from, o.allow_other_data);
    if (ck.seed != config.seed) {
      throw_input_error(str((*resume_from / kTrainerStateFileName).string(), ": seed"),
                        str(ck.seed, " is not the config's seed ", config.seed));
    }
    if (ck.data_cursor.position > dataset.num_sequences()) {
      throw_input_error(str((*resume_from / kTrainerStateFileName).string(), ": data_cursor.position"),
                        str(ck.data_cursor.position, " lies past the set's ", dataset.num_sequences(), " sequences"));
    }
    // The released config an earlier --init brought in stays with the run.
    if (ck.config.contains(kInitConfigKey)) config_json[kInitConfigKey] = ck.config.at(kInitConfigKey);
    if (!own_part_only) state.params = unflatten(tracker, config, flat, ck.master);
    state.optimizer =
        restore_optimizer_part(tracker, flat, rank, ck.first, ck.master, ck.exp_avg, ck.exp_avg_sq, ck.step);
    cursor = ck.data_cursor;
    tokens_seen = ck.tokens_seen;
    last_good = resume_from->string();
    if (lead) {
      log << "dflash train: resuming from " << last_good << " (step " << ck.step << ", written on " << ck.world_size
          << " rank(s))\n";
    }
  } else if (own_part_only) {
    // The values of this rank's part alone: --init's weights, or the seeded ones (a pure function of
    // seed, tensor and element). Every rank checks the directory; each reads only its part's values.
    std::optional<DrafterWeightsReader> init;
    if (o.init) init.emplace(DrafterWeightsReader::open(*o.init, &config));
    state.optimizer = make_optimizer_state(tracker, flat, rank, [&](std::int64_t first, std::span<double> out) {
      if (init) return init->read_flat(first, out);
      seeded_flat_values(config, config.seed, first, out);
    });
  } else {
    DrafterParameters<double> initial = o.init ? import_drafter_for_run(tracker, *o.init, config)
                                               : seeded_drafter_parameters(tracker, config, config.seed);
    state = make_training_state(tracker, config, training, comm, std::move(initial));
  }
  if (!resume_from && lead && o.resume)
    log << "dflash train: --resume: no checkpoint in " << o.out.string() << ", starting at step 0\n";
  const TargetWeights target = TargetWeights::open(o.target, config);
  const std::unique_ptr<StepBackend> backend =
      o.make_step_backend ? o.make_step_backend(comm, config, training, target, std::move(state))
      : o.backend == TrainingBackend::cuda
          ? make_cuda_step_backend(comm, config, training, target, std::move(state))
          : make_reference_step_backend(tracker, comm, config, training, target, std::move(state));
  // What the start held on the host that the steps never read: a device backend's optimizer part,
  // which went into the backend. Its blocks would stay cached in the storage pool
  // (reference/storage_pool.hpp) for the whole run, as the steps never allocate those sizes again:
  // 3 P / R doubles, 5 GB a rank at full scale under ZeRO-1 (the parameters' P went at the release
  // above; bench/results/host_memory.md).
  release_cached_storage();  // after the backend is made

  // The precision its checkpoints are written in is the one the disk gate counted.
  if (backend->master_dtype() != master_dtype_of(o.backend))
    throw std::logic_error("dflash train: the step backend's master precision is not its --backend's");
  if (o.after_start) o.after_start();

  // Everything is valid: from here on the run writes.
  const fs::path metrics_path = o.out / "metrics.jsonl", eval_path = o.out / "eval.jsonl";
  AppendOnlyFile metrics, eval_log;  // each record written whole and flushed to disk, or the run stops
  if (lead) {
    fs::create_directories(o.out);
    truncate_metrics_file(metrics_path, backend->completed_steps());  // steps after the checkpoint are re-run
    truncate_metrics_file(eval_path, backend->completed_steps());
    metrics = AppendOnlyFile(metrics_path);
    if (eval_set) eval_log = AppendOnlyFile(eval_path);
  }
  const StopSignal stop_signal;
  const bool terminal = ::isatty(STDERR_FILENO) == 1;

  // The optimizer's vectors are gathered one at a time as the lead writes them (kOptimizerParts'
  // order, write_run_checkpoint_from): the lead holds at most two, in the master precision. Before
  // it gathers them, the lead lets go of what the steps freed but the process keeps: the blocks the
  // storage pool caches (reference/storage_pool.hpp: the reference step's tensors, a sequence's
  // doubles) and the free memory malloc keeps (the step's bf16 sequences, when they lie under its
  // mmap threshold): its peak is then the larger of the steps and the save, not their sum. Its next
  // step maps that memory afresh, once a save.
  auto save = [&](const DataCursor& at) {
    if (lead) release_cached_storage();
    const RunCheckpoint ck{backend->completed_steps(),
                           at,
                           config.seed,
                           tokens_seen,
                           config_json,
                           R,
                           {},
                           {},
                           {},
                           0,  // whole vectors, from the backend
                           dataset.fingerprint()};
    // Each part's gather starts after a barrier (over `comm`, on the host): while the lead writes
    // and hashes the model file (6.9 GB at full scale) before it gathers the moments, the other
    // ranks wait here, not inside the backend's gather, where a NCCL wait has a time limit
    // (DFLASH_NCCL_TIMEOUT_S) that a slow file system must not reach.
    if (lead) {
      const CheckpointWriteOptions write{backend->master_dtype(), o.keep, {}};
      write_run_checkpoint_from(
          o.out, config, ck,
          [&](OptimizerPart part) {
            barrier(comm);
            return backend->gather_optimizer(part, /*to_this_rank=*/true);
          },
          write);
    } else {
      for (const OptimizerPart part : kOptimizerParts) {
        barrier(comm);
        backend->gather_optimizer(part, /*to_this_rank=*/false);
      }
    }
    barrier(comm);
    last_good = (o.out / checkpoint_name(backend->completed_steps())).string();
  };

  const GlobalBatchLayout layout = GlobalBatchLayout::of(training, R);
  DataOrder order(dataset.num_sequences(), config.seed);
  const std::vector<std::int64_t> mine = layout.sequences_of_rank(rank);
  // A step that reads F and G only as bf16 gets them so, rounded as they are read (rank_sequences.hpp).
  const bool bf16_features = backend->reads_features_as_bf16();
  RunSummary summary;
  bool stopped = false;
  for (std::int64_t t = backend->completed_steps(); t < training.total_steps && !stopped; ++t) {
    const auto start = std::chrono::steady_clock::now();
    backend->reset_peaks();
    const DataCursor batch_start = cursor;
    const std::vector<std::int64_t> batch = order.batch(cursor, training.global_batch_sequences);
    std::vector<DrafterBatch<double>> batches;
    std::vector<Bf16Features> rounded;  // F and G, when the step reads them as bf16
    batches.reserve(mine.size());
    rounded.reserve(mine.size());
    std::vector<RankSequences> sequences;
    std::int64_t flags[2] = {0, 0};  // truncated sequences (sum), stop requested (max)
    BlockStatistics blocks(config.block_size);
    // A shard that fails while the run reads it (cut short under it): every rank learns of it, the
    // state of the last completed step is saved with the cursor at this batch, then the run stops.
    std::string data_error;
    try {
      for (const std::int64_t g : mine) {
        const std::int64_t i = batch[std::size_t(g)];
        if (bf16_features) {
          FeatureDataset::Bf16Batch q = dataset.sequence_bf16_batch(tracker, i, training.max_context);
          flags[0] += q.truncated ? 1 : 0;
          batches.push_back(std::move(q.batch));
          rounded.push_back(std::move(q.features));
          sequences.push_back({g, &batches.back(), &rounded.back()});
        } else {
          FeatureDataset::Batch q = dataset.sequence_batch(tracker, i, training.max_context);
          flags[0] += q.truncated ? 1 : 0;
          batches.push_back(std::move(q.batch));
          sequences.push_back({g, &batches.back()});
        }
      }
    } catch (const InputError& e) {
      data_error = e.what();
    }
    std::int64_t data_failed = data_error.empty() ? 0 : 1;
    comm.all_reduce(&data_failed, &data_failed, 1, CommType::i64, CommOp::max);
    if (data_failed != 0) {
      batches.clear();
      rounded.clear();
      cursor = batch_start;
      save(cursor);
      throw_input_error("--data", str(data_error.empty() ? std::string("a shard failed on another rank") : data_error,
                                      "; the run saved step ", backend->completed_steps(), " (", last_good,
                                      ") and stopped: restore the data, then --resume"));
    }
    const StepMetrics m = backend->step(sequences, {verdict.plan.request.layout.bucket_bytes, last_good, nullptr});
    for (const SequenceHits& h : m.sequence_hits) add_block_hits(blocks, config.block_size, h.keep, h.labelled, h.hits);
    std::vector<double> packed = blocks.packed();
    all_reduce_sum(comm, packed);
    blocks = BlockStatistics::unpacked(packed, config.block_size);
    comm.all_reduce(&flags[0], &flags[0], 1, CommType::i64, CommOp::sum);
    batches.clear();
    rounded.clear();
    tokens_seen += m.tokens;

    StepRecord r;
    r.step = m.step;
    r.loss = m.loss;
    r.ce = m.ce;
    r.kl = m.kl;
    r.accuracy = m.accuracy;
    r.weight_sum = m.weight_sum;
    r.lr = m.lr;
    r.grad_norm = m.grad_norm;
    r.clipped = m.clipped;
    r.tokens = m.tokens;
    r.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.tokens_per_s = r.step_s > 0 ? double(m.tokens) / r.step_s : 0.0;
    r.peak_bytes = backend->peak_bytes();
    r.truncated_sequences = flags[0];
    r.accuracy_by_position = blocks.accuracy_by_position();
    r.acceptance_length = blocks.acceptance_length();
    summary.add(r);
    if (lead) {
      metrics.append(step_record_json(r).dump() + "\n");
      const double left =
          summary.seconds / double(summary.last_step - summary.first_step + 1) * double(training.total_steps - t - 1);
      if (terminal) {
        std::cerr << "\r" << progress_line(r, training.total_steps, left) << "\033[K" << std::flush;
      } else if ((t + 1) % std::max<std::int64_t>(1, o.progress_every) == 0 || t + 1 == training.total_steps) {
        std::cerr << progress_line(r, training.total_steps, left) << "\n";
      }
    }
    if (eval_set && (t + 1) % o.eval_every == 0) {
      const EvalRecord e = evaluate(comm, *backend, config, training, *eval_set, t);
      if (lead) eval_log.append(eval_record_json(e).dump() + "\n");
    }
    if (o.after_step) o.after_step(t);

    flags[1] = StopSignal::requested() ? 1 : 0;
    comm.all_reduce(&flags[1], &flags[1], 1, CommType::i64, CommOp::max);
    stopped = flags[1] != 0;
    if (stopped || saves_after_step(t, training.total_steps, o.save_every)) save(cursor);
  }
  if (lead && terminal && summary.last_step >= summary.first_step) std::cerr << "\n";
  if (summary.last_step < summary.first_step) {  // resumed at the end: nothing to do
    if (lead) log << "dflash train: the run is already at total_steps = " << training.total_steps << "\n";
  }
  if (lead) {
    if (stopped)
      log << "dflash train: stopped by signal " << StopSignal::signal_number() << " after step " << summary.last_step
          << "\n";
    print_run_summary(log, summary, last_good);
  }
  return 0;
}

}  // namespace dflash
