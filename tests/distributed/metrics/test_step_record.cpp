// metrics.jsonl records carry every TRAINING §17 field and read back; a resumed run's re-logged
// steps are dropped; the report draws one point per step in each of its three panels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "distributed/metrics/svg_report.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using ::testing::HasSubstr;

StepRecord record(std::int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 5.0 - 0.1 * double(step);
  r.ce = 4;
  r.kl = 1;
  r.accuracy = 0.1 * double(step);
  r.weight_sum = 12.5;
  r.lr = 1e-3;
  r.grad_norm = 2;
  r.clipped = true;
  r.tokens = 40;
  r.tokens_per_s = 1000 + double(step);
  r.step_s = 0.04;
  r.peak_bytes = {{"parameters", 100}, {"saved", 7}};
  r.truncated_sequences = 1;
  r.accuracy_by_position = {0.5, 0.25, 0};
  r.acceptance_length = 1.75;
  return r;
}

TEST(StepRecord, JsonHasEveryFieldOfSection17AndReadsBack) {
  const nlohmann::json j = step_record_json(record(3));
  for (const char* key :
       {"step", "loss", "ce", "kl", "accuracy", "weight_sum", "lr", "grad_norm", "clipped", "tokens", "tokens_per_s",
        "step_s", "peak_bytes", "truncated_sequences", "accuracy_by_position", "acceptance_length"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.size(), 16u);
  EXPECT_EQ(step_record_json(step_record_from_json(j)), j);
  nlohmann::json missing = j;
  missing.erase("acceptance_length");
  EXPECT_THAT(input_error_message([&] { step_record_from_json(missing); }), HasSubstr("acceptance_length"));
}

// An integer of a record (step, tokens, truncated_sequences, a peak_bytes value) given as a fraction,
// a float or an integer beyond int64 was converted by nlohmann's get<> (1.5 read as 1; 1e300
// undefined behaviour, found by fuzz/metrics under UBSan): each is refused, naming the key and value.
TEST(StepRecord, IntegerFieldThatIsNotAnInt64IsRefusedNamingKeyAndValue) {
  using nlohmann::json;
  const json good = step_record_json(record(3));
  for (const char* pointer : {"/step", "/tokens", "/truncated_sequences", "/peak_bytes/saved"}) {
    for (const json& value : {json(1.5), json(1e300), json(-1e300), json(std::uint64_t(1) << 63), json("3")}) {
      json j = good;
      j[json::json_pointer(pointer)] = value;
      const std::string message = input_error_message([&] { step_record_from_json(j); });
      EXPECT_THAT(message, HasSubstr(std::string(pointer).substr(std::string(pointer).rfind('/') + 1)))
          << pointer << " = " << value;
      EXPECT_THAT(message, HasSubstr(value.dump())) << pointer << " = " << value;
    }
  }
}

TEST(MetricsReport, ResumedStepsKeepTheirLastRecordAndTheSvgHasOnePointPerStep) {
  ScratchDirectory run;
  {
    std::ofstream out(run / "metrics.jsonl");
    for (std::int64_t s : {0, 1, 2, 3}) out << step_record_json(record(s)).dump() << "\n";
  }
  truncate_metrics_file(run / "metrics.jsonl", 2);  // resumed from a checkpoint after step 1
  {
    std::ofstream out(run / "metrics.jsonl", std::ios::app);
    for (std::int64_t s : {2, 3, 4}) out << step_record_json(record(s)).dump() << "\n";
  }
  const std::vector<StepRecord> records = read_metrics_file(run / "metrics.jsonl");
  ASSERT_EQ(records.size(), 5u);
  for (std::int64_t s = 0; s < 5; ++s) EXPECT_EQ(records[std::size_t(s)].step, s);
  const auto path = write_metrics_report(run.path());
  std::ifstream in(path);
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr(">loss<"));
  EXPECT_THAT(svg, HasSubstr(">accuracy<"));
  EXPECT_THAT(svg, HasSubstr(">tokens/s<"));
  std::size_t polylines = 0, points = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    ++polylines;
    const std::size_t begin = svg.find("points='", at) + 8, end = svg.find('\'', begin);
    const std::string list = svg.substr(begin, end - begin);
    points += std::size_t(std::count(list.begin(), list.end(), ','));
  }
  EXPECT_EQ(polylines, 3u);
  EXPECT_EQ(points, 15u);
}

TEST(MetricsReport, MalformedLineIsRefusedNamingFileAndLine) {
  ScratchDirectory run;
  write_whole_file(run / "metrics.jsonl", step_record_json(record(0)).dump() + "\n{not json\n");
  EXPECT_THAT(input_error_message([&] { read_metrics_file(run / "metrics.jsonl"); }),
              HasSubstr("metrics.jsonl line 2"));
}

}  // namespace
}  // namespace dflash
