#include "distributed/metrics/step_record.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>

#include "io/errors.hpp"
#include "reference/memory_tracker.hpp"

namespace dflash {

using nlohmann::json;

namespace {

// The longest text nlohmann::json writes for a double (17 significant digits, a sign and a
// three-digit exponent) and for an int64.
constexpr double kLongestDouble = -2.2250738585072014e-308;
constexpr std::int64_t kLongestInteger = std::numeric_limits<std::int64_t>::min();

}  // namespace

RecordStatistics longest_record_statistics(std::int64_t block_size) {
  RecordStatistics r;
  r.step = r.tokens = r.truncated_sequences = kLongestInteger;
  r.loss = r.ce = r.kl = r.accuracy = r.weight_sum = r.acceptance_length = kLongestDouble;
  r.accuracy_by_position.assign(std::size_t(std::max<std::int64_t>(block_size, 0)), kLongestDouble);
  return r;
}

std::uint64_t step_record_line_bytes_at_most(std::int64_t block_size) {
  StepRecord r;
  static_cast<RecordStatistics&>(r) = longest_record_statistics(block_size);
  r.lr = r.grad_norm = r.tokens_per_s = r.step_s = kLongestDouble;
  r.clipped = false;  // "false" is longer than "true"
  for (int c = 0; c < kMemoryCategoryCount; ++c)
    r.peak_bytes[std::string(category_name(static_cast<MemoryCategory>(c)))] = kLongestInteger;
  return step_record_json(r).dump().size() + 1;
}

void write_record_statistics(json& into, const RecordStatistics& r) {
  into["step"] = r.step;
  into["loss"] = r.loss;
  into["ce"] = r.ce;
  into["kl"] = r.kl;
  into["accuracy"] = r.accuracy;
  into["weight_sum"] = r.weight_sum;
  into["tokens"] = r.tokens;
  into["truncated_sequences"] = r.truncated_sequences;
  into["accuracy_by_position"] = r.accuracy_by_position;
  into["acceptance_length"] = r.acceptance_length;
}

namespace {

// An integer of a record that int64 holds; nlohmann's get<> would truncate 1.5, wrap 2^63 and
// convert 1e300 with undefined behaviour (found by fuzz/metrics).
std::int64_t record_integer(const json& value, std::string_view key) {
  const bool fits = value.is_number_integer() &&
                    !(value.is_number_unsigned() &&
                      value.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()));
  if (!fits) throw_input_error("metrics record", str("'", key, "' is ", value.dump(), ", not a 64-bit integer"));
  return value.get<std::int64_t>();
}

}  // namespace

void read_record_statistics(const json& from, RecordStatistics& r) {
  r.step = record_integer(from.at("step"), "step");
  r.loss = from.at("loss").get<double>();
  r.ce = from.at("ce").get<double>();
  r.kl = from.at("kl").get<double>();
  r.accuracy = from.at("accuracy").get<double>();
  r.weight_sum = from.at("weight_sum").get<double>();
  r.tokens = record_integer(from.at("tokens"), "tokens");
  r.truncated_sequences = record_integer(from.at("truncated_sequences"), "truncated_sequences");
  r.accuracy_by_position = from.at("accuracy_by_position").get<std::vector<double>>();
  r.acceptance_length = from.at("acceptance_length").get<double>();
}

json step_record_json(const StepRecord& r) {
  json j = {{"lr", r.lr},         {"grad_norm", r.grad_norm},  {"clipped", r.clipped}, {"tokens_per_s", r.tokens_per_s},
            {"step_s", r.step_s}, {"peak_bytes", r.peak_bytes}};
  write_record_statistics(j, r);
  return j;
}

StepRecord step_record_from_json(const json& j) {
  StepRecord r;
  try {
    read_record_statistics(j, r);
    r.lr = j.at("lr").get<double>();
    r.grad_norm = j.at("grad_norm").get<double>();
    r.clipped = j.at("clipped").get<bool>();
    r.tokens_per_s = j.at("tokens_per_s").get<double>();
    r.step_s = j.at("step_s").get<double>();
    const json& peak = j.at("peak_bytes");
    if (!peak.is_object()) throw_input_error("metrics record", str("'peak_bytes' is ", peak.dump(), ", not an object"));
    for (const auto& [category, bytes] : peak.items()) {
      r.peak_bytes[category] = record_integer(bytes, str("peak_bytes.", category));
    }
  } catch (const json::exception& e) {
    throw_input_error("metrics record", e.what());
  }
  return r;
}

namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, std::round(seconds)));
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return text;
}

}  // namespace

std::string progress_line(const StepRecord& r, std::int64_t total_steps, double seconds_left) {
  char text[160];
  std::snprintf(text, sizeof text, "step %lld/%lld  loss %.4f  acc %.3f  %.0f tok/s  eta %s",
                static_cast<long long>(r.step + 1), static_cast<long long>(total_steps), r.loss, r.accuracy,
                r.tokens_per_s, clock_text(seconds_left).c_str());
  return text;
}

void RunSummary::add(const StepRecord& r) {
  if (last_step < first_step) {
    first_step = r.step;
    first_loss = r.loss;
  }
  last_step = r.step;
  last_loss = r.loss;
  last_accuracy = r.accuracy;
  last_acceptance = r.acceptance_length;
  tokens += r.tokens;
  seconds += r.step_s;
  truncated_sequences += r.truncated_sequences;
}

void print_run_summary(std::ostream& out, const RunSummary& s, const std::string& last_checkpoint) {
  if (s.last_step < s.first_step) {
    out << "dflash train: no step run; last checkpoint " << last_checkpoint << "\n";
    return;
  }
  out << "dflash train: steps " << s.first_step << ".." << s.last_step << ", loss " << s.first_loss << " -> "
      << s.last_loss << ", accuracy " << s.last_accuracy << ", acceptance length " << s.last_acceptance << ", "
      << s.tokens << " tokens in " << s.seconds << " s (" << (s.seconds > 0 ? double(s.tokens) / s.seconds : 0.0)
      << " tok/s), " << s.truncated_sequences << " sequences truncated; last checkpoint " << last_checkpoint << "\n";
}

}  // namespace dflash
