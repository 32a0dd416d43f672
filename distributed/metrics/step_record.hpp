// Metrics and progress of a training run (TRAINING §17): one JSON object per optimizer step in
// <run>/metrics.jsonl, a progress line on stderr (rewritten in place on a terminal, one line every
// N steps otherwise), and a summary at the end.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dflash {

// What a step record and an evaluation record (run/evaluation.hpp) both report, under the same
// JSON keys: the loss statistics over W (SPEC §5) and the block statistics (block_statistics.hpp).
struct RecordStatistics {
  std::int64_t step = 0;  // t, 0-based
  double loss = 0, ce = 0, kl = 0, accuracy = 0, weight_sum = 0;
  std::int64_t tokens = 0;  // block tokens with w01 = 1
  std::int64_t truncated_sequences = 0;
  std::vector<double> accuracy_by_position;  // k = 1 .. B-1
  double acceptance_length = 0;
};

// Writes the shared fields into the object `into`; reads them back (nlohmann::json::exception
// naming the key when one is missing or of another type).
void write_record_statistics(nlohmann::json& into, const RecordStatistics& r);
void read_record_statistics(const nlohmann::json& from, RecordStatistics& r);

struct StepRecord : RecordStatistics {
  double lr = 0, grad_norm = 0;
  bool clipped = false;
  double tokens_per_s = 0, step_s = 0;
  std::map<std::string, std::int64_t> peak_bytes;  // per category, SPEC §8 names
};

nlohmann::json step_record_json(const StepRecord& r);
StepRecord step_record_from_json(const nlohmann::json& j);  // throws dflash::InputError naming the key

// The statistics a record's line is longest with at block_size B (every double and integer at its
// longest text, B accuracies): what a line of metrics.jsonl or eval.jsonl can take at the most.
RecordStatistics longest_record_statistics(std::int64_t block_size);
// The bytes of one metrics.jsonl line (the record and its newline) at the most: the disk gate's
// count of what a step appends (disk_gate.hpp).
std::uint64_t step_record_line_bytes_at_most(std::int64_t block_size);

// "step 12/100  loss 3.1416  acc 0.250  1234 tok/s  eta 0:01:23"
std::string progress_line(const StepRecord& r, std::int64_t total_steps, double seconds_left);

struct RunSummary {
  std::int64_t first_step = 0, last_step = -1;  // steps run by this invocation
  double first_loss = 0, last_loss = 0, last_accuracy = 0, last_acceptance = 0;
  std::int64_t tokens = 0;
  double seconds = 0;
  std::int64_t truncated_sequences = 0;
  void add(const StepRecord& r);
};

void print_run_summary(std::ostream& out, const RunSummary& s, const std::string& last_checkpoint);

}  // namespace dflash
