// The host's share of a training step, per sequence, at the width of the full-scale drafter: what
// `dflash train` does on the CPU before the GPU sees a sequence, in the order it does it.
//   open     FeatureDataset::open, every value of every shard read and checked (before step 0;
//            one rank's share of it in a run of R ranks, ShardValueCheck)
//   read     FeatureDataset::sequence_batch: one sequence from the maps into the step's batch
//   checks   the step's own checks of its batch (validate_drafter_batch, prepare_sequences with
//            the sampled anchors, validate_teacher_rows)
//   upload   the host part of SequenceUpload (cuda/drafter/step_loop.hpp): anchors and block rows,
//            F rounded to bf16, the teacher rows of the labelled block rows gathered and rounded to
//            bf16, into the step's staging (UploadStaging), without the copy to the device
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
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cuda/drafter/step_loop.hpp"
#include "distributed/data/feature_dataset.hpp"
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
  std::vector<double> read, checks, upload, total;
  for (std::int64_t i = 0; i < set.num_sequences(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const FeatureDataset::Batch q = set.sequence_batch(tracker, i, max_context);
    const double t_read = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    const DrafterStepOptions options = drafter_step_options(config, 0, std::uint32_t(i));
    validate_drafter_batch(config, q.batch, options.sequence_offset);
    const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, q.batch, options);
    drafter_detail::validate_teacher_rows(q.batch, seqs);
    const double t_checks = seconds_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    const SequenceUpload<HostVectorBackend> up(be, staging, q.batch, 0, seqs[0], false);
    const double t_upload = seconds_since(t2);
    std::printf("sequence %lld (%lld rows, %zu block rows): read %.3f s, checks %.3f s, upload %.3f s\n",
                static_cast<long long>(i), static_cast<long long>(q.batch.context_length()),
                seqs[0].blocks.valid.size(), t_read, t_checks, t_upload);
    if (i == 0 && set.num_sequences() > 1) continue;  // pages the pool in
    read.push_back(t_read);
    checks.push_back(t_checks);
    upload.push_back(t_upload);
    total.push_back(t_read + t_checks + t_upload);
  }
  std::printf("median per sequence: read %.3f s, checks %.3f s, upload %.3f s, host total %.3f s\n", median(read),
              median(checks), median(upload), median(total));
  if (!json_path.empty()) {
    const nlohmann::json j = {{"config", config_path},
                              {"data", data},
                              {"bytes", bytes},
                              {"open_s", open_s},
                              {"sequences", set.num_sequences()},
                              {"read_s", read},
                              {"checks_s", checks},
                              {"upload_s", upload},
                              {"median_total_s", median(total)}};
    write_file_atomically(json_path, j.dump(1) + "\n");
  }
  return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) { return dflash::run(argc, argv); }
