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

inline std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
