// A synthetic run for the tests of `dflash train`: data made once per test binary, runs compared
// tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/checkpoint/save_restore.hpp"
#include "distributed/data/synthetic_set.hpp"
#include "distributed/run/trainer.hpp"
#include "distributed/single_process_communicator.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash::train_testing {

// configs/tiny-train.json's synthetic set (24 sequences of 16..32 rows; max_context 24 truncates
// some), written once under the system temp directory.
inline const std::filesystem::path& synthetic_run_data() {
  static const ScratchDirectory dir;  // removed at exit
  static const std::filesystem::path path = [] {
    SyntheticDataSpec spec;
    spec.sequences = 24;
    spec.shards = 2;
    write_synthetic_data(tiny_config(), spec, dir / "syn");
    return dir / "syn";
  }();
  return path;
}

// A run of configs/tiny-train.json on the synthetic set into `out` (the reference backend).
inline TrainingRunOptions options_for(const std::filesystem::path& out) {
  TrainingRunOptions o;
  o.config = tiny_train_config_path();
  o.data = synthetic_run_data() / "features";
  o.target = synthetic_run_data() / "target";
  o.out = out;
  return o;
}

// `dflash train` in process on one rank; its log into *log when given.
inline int train(const TrainingRunOptions& o, std::string* log = nullptr) {
  SingleProcessCommunicator comm;
  std::ostringstream out;
  const int code = run_training(o, comm, out);
  if (log) *log = out.str();
  return code;
}

// A run with --eval-data (the synthetic set itself) and --eval-every 5, whose eval.jsonl must
// hold a record after steps 4, 9, 14, 19 over the whole held-out set, its loss falling, and whose
// final weights must equal `without_eval`'s (evaluating does not touch training).
// The records of a run's eval.jsonl, one a line.
inline std::vector<nlohmann::json> eval_records(const std::filesystem::path& run) {
  std::ifstream in(run / "eval.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

inline void expect_held_out_evaluation(TrainingRunOptions o, const std::filesystem::path& without_eval) {
  o.eval_data = synthetic_run_data() / "features";
  o.eval_every = 5;
  ASSERT_EQ(train(o), 0);
  const std::vector<nlohmann::json> records = eval_records(o.out);
  ASSERT_EQ(records.size(), 4u);
  for (std::size_t k = 0; k < records.size(); ++k) {
    EXPECT_EQ(records[k].at("step"), std::int64_t(5 * k + 4));
    EXPECT_EQ(records[k].at("sequences"), 24);  // the whole held-out set
    EXPECT_EQ(records[k].at("accuracy_by_position").size(), 3u);
  }
  EXPECT_LT(records.back().at("loss").get<double>(), records.front().at("loss").get<double>());
  EXPECT_EQ(file_text(o.out / "step-00000020" / kModelFileName),
            file_text(without_eval / "step-00000020" / kModelFileName));
}

inline double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

inline void expect_same_state_within(const RunCheckpoint& a, const RunCheckpoint& b, double tolerance) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.data_cursor, b.data_cursor);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
  ASSERT_EQ(a.master.size(), b.master.size());
  EXPECT_LE(relative_difference(a.master, b.master), tolerance);
  EXPECT_LE(relative_difference(a.exp_avg, b.exp_avg), tolerance);
  EXPECT_LE(relative_difference(a.exp_avg_sq, b.exp_avg_sq), tolerance);
}

inline std::vector<std::string> directory_listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace dflash::train_testing
