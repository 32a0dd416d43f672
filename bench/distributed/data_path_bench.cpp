// The host's share of a training step, per sequence, at the width of the full-scale drafter: what
// `dflash train` does on the CPU before the GPU sees a sequence, in the order it does it.
//   open     FeatureDataset::open, every value of every shard read and checked (before step 0;
//            one rank's share of it in a run of R ranks, ShardValueCheck)
//   read     one sequence from the maps into the step's batch: F and G in bf16
//            (sequence_bf16_batch: what a CUDA run reads, distributed/rank_sequences.hpp), or in double
//            (sequence_batch: the reference's, and the CUDA run's before)
//   checks   the step's own checks of its batch (validate_rank_sequences, prepare_sequences with
//            the sampled anchors, validate_rank_teacher_rows)
//   upload   the host part of SequenceUpload (cuda/drafter/step_loop.hpp): anchors and block rows,
//            F and the teacher rows of the labelled block rows in bf16 (copied and gathered, or
//            rounded from the doubles), into the step's staging (UploadStaging), without the copy
//            to the device
// Every sequence is taken both ways, the bf16 path first, so that both meet the same page cache.
// Reported: the median seconds of each phase over the set's sequences (after one sequence that
// pages in the storage pool and the upload's staging), and open's rate. A GPU would run a
// full-scale sequence's step in about a second (an estimate: 8.6e14 executed FLOPs,
// `bench_cuda_drafter_step --count`, at 790 TFLOP/s; no GPU has run it yet): the host's time adds
// to that, unhidden, once per sequence.
//
// The data: any feature set and its config; bench/distributed/full_scale_width.json has the full-scale
// drafter's H, K, block size and anchors with a small vocabulary, so that `dflash data synth` writes
// it quickly:
//   build/app/dflash data synth --config bench/distributed/full_scale_width.json --out /tmp/wide
//       --sequences 5 --shards 1 --min-length 4096 --max-length 4096      (one command line)
//   build/bench/distributed/bench_data_path --config bench/distributed/full_scale_width.json --data /tmp/wide/features
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cuda/drafter/step_loop.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/rank_sequences.hpp"
#include "io/file_write.hpp"
#include "reference/drafter.hpp"
#include "reference/drafter_config.hpp"

namespace dflash {
namespace {

// SequenceUpload's backend, on the host: an upload records its size and copies nothing, so that the
// time is the host's work (rounding, gathering) without the copy a GPU would make instead.
struct HostVectorBackend {
  template <class T>
  struct Buffer {
    std::size_t n = 0;
    T* data() { return nullptr; }
    std::size_t size() const { return n; }
    void zero() {}
  };
  template <class T>
  Buffer<T> buffer(MemoryCategory, std::size_t n) const {
    return {n};
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory, std::span<const T> values) const {
    return {values.size()};
  }
  template <class T>
  Buffer<T> from_host(MemoryCategory, const std::vector<T>& values) const {
    return {values.size()};
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int run(int argc, char** argv) {
  CLI::App app{"The host's share of a training step per sequence (bench/distributed/data_path_bench.cpp)"};
  std::string config_path, data, json_path;
  std::int64_t max_context = 4096;
  app.add_option("--config", config_path, "drafter config of the set")->required();
  app.add_option("--data", data, "feature set directory")->required();
  app.add_option("--max-context", max_context, "rows a sequence is cut to (TRAINING §12)")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the numbers here");
  CLI11_PARSE(app, argc, argv);

  const DrafterConfig config = load_drafter_config(config_path);
  const auto t_open = std::chrono::steady_clock::now();
  const FeatureDataset set = FeatureDataset::open(data, FeatureSetShape::of(config));
  const double open_s = seconds_since(t_open);
  std::uintmax_t bytes = 0;
  for (std::int64_t s = 0; s < set.num_shards(); ++s) bytes += set.shard(s).file_bytes();
  std::printf("open: %lld shard(s), %lld sequences, %.2f GB read and checked in %.3f s (%.2f GB/s)\n",
              static_cast<long long>(set.num_shards()), static_cast<long long>(set.num_sequences()), bytes / 1e9,
              open_s, bytes / 1e9 / open_s);

  MemoryTracker tracker, host;
  const HostVectorBackend be;
  UploadStaging staging(host);  // one for the run, as the step's loop keeps one for its sequences
  struct Phases {
    std::vector<double> read, checks, upload, total;
  };
  Phases in_bf16, in_double;
  // One sequence one way: read, checks, upload, timed.
  auto take = [&](std::int64_t i, bool bf16, Phases& into) {
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<FeatureDataset::Bf16Batch> r;
    std::optional<FeatureDataset::Batch> d;
    if (bf16) {
      r.emplace(set.sequence_bf16_batch(tracker, i, max_context));
    } else {
      d.emplace(set.sequence_batch(tracker, i, max_context));
    }
    const double t_read = seconds_since(t0);
    const DrafterBatch<double>& batch = bf16 ? r->batch : d->batch;
    const RankSequences s{i, &batch, bf16 ? &r->features : nullptr};
    const auto t1 = std::chrono::steady_clock::now();
    const DrafterStepOptions options = drafter_step_options(config, 0, std::uint32_t(i));
    validate_rank_sequences(config, s, options);
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
    validate_rank_teacher_rows(s, seqs);
    const double t_checks = seconds_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    const SequenceUpload<HostVectorBackend> up(be, staging, batch, 0, seqs[0], false, s.bf16_features);
    const double t_upload = seconds_since(t2);
    std::printf("sequence %lld (%lld rows, %zu block rows), %s: read %.3f s, checks %.3f s, upload %.3f s\n",
                static_cast<long long>(i), static_cast<long long>(batch.context_length()), seqs[0].blocks.valid.size(),
                bf16 ? "bf16  " : "double", t_read, t_checks, t_upload);
    if (i == 0 && set.num_sequences() > 1) return;  // pages the pool and the staging in
    into.read.push_back(t_read);
    into.checks.push_back(t_checks);
    into.upload.push_back(t_upload);
    into.total.push_back(t_read + t_checks + t_upload);
  };
  for (std::int64_t i = 0; i < set.num_sequences(); ++i) {
    take(i, true, in_bf16);
    take(i, false, in_double);
  }
  for (const auto& [name, p] : {std::pair<const char*, const Phases*>{"bf16  ", &in_bf16}, {"double", &in_double}}) {
    std::printf("median per sequence, %s: read %.3f s, checks %.3f s, upload %.3f s, host total %.3f s\n", name,
                median(p->read), median(p->checks), median(p->upload), median(p->total));
  }
  if (!json_path.empty()) {
    auto phases = [&](const Phases& p) {
      return nlohmann::json{
          {"read_s", p.read}, {"checks_s", p.checks}, {"upload_s", p.upload}, {"median_total_s", median(p.total)}};
    };
    const nlohmann::json j = {{"config", config_path},
                              {"data", data},
                              {"bytes", bytes},
                              {"open_s", open_s},
                              {"sequences", set.num_sequences()},
                              {"bf16", phases(in_bf16)},
                              {"double", phases(in_double)}};
    write_file_atomically(json_path, j.dump(1) + "\n");
  }
  return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) { return dflash::run(argc, argv); }
