// metrics.jsonl records carry every TRAINING §17 field and read back; a resumed run's re-logged
// steps are dropped; the report draws one point per step in each of its three panels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

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
  // Each key holds its own field (the round trip above would not see two fields swapped).
  const StepRecord r = record(3);
  EXPECT_EQ(j.at("loss"), r.loss);
  EXPECT_EQ(j.at("ce"), r.ce);
  EXPECT_EQ(j.at("kl"), r.kl);
  EXPECT_EQ(j.at("accuracy"), r.accuracy);
  EXPECT_EQ(j.at("weight_sum"), r.weight_sum);
  EXPECT_EQ(j.at("lr"), r.lr);
  EXPECT_EQ(j.at("grad_norm"), r.grad_norm);
  EXPECT_EQ(j.at("tokens_per_s"), r.tokens_per_s);
  EXPECT_EQ(j.at("step_s"), r.step_s);
  EXPECT_EQ(j.at("acceptance_length"), r.acceptance_length);
  nlohmann::json missing = j;
  missing.erase("acceptance_length");
  EXPECT_THAT(input_error_message([&] { step_record_from_json(missing); }), HasSubstr("acceptance_length"));
}

// The summary of an invocation that resumed at step 7 and ran steps 7, 8 and 9: the first loss is
// step 7's, the sums run over all three.
TEST(RunSummary, FirstStepIsTheInvocationsFirstAndSumsCoverEveryStep) {
  RunSummary s;
  for (std::int64_t step : {7, 8, 9}) s.add(record(step));
  EXPECT_EQ(s.first_step, 7);
  EXPECT_EQ(s.first_loss, record(7).loss);
  EXPECT_EQ(s.last_step, 9);
  EXPECT_EQ(s.last_loss, record(9).loss);
  EXPECT_EQ(s.last_accuracy, record(9).accuracy);
  EXPECT_EQ(s.tokens, 3 * record(7).tokens);
  EXPECT_EQ(s.truncated_sequences, 3);
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

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Class 1 of issue 22: an empty or blank metrics.jsonl crashed the report (records.front() of no
// records) and left a 0-byte report.svg.tmp.
TEST(MetricsReport, EmptyOrBlankMetricsIsRefusedNamingTheFileAndLeavesNothing) {
  for (const char* text : {"", "   \n\n  \n"}) {
    ScratchDirectory run;
    write_whole_file(run / "metrics.jsonl", text);
    const std::string message = input_error_message([&] { write_metrics_report(run.path()); });
    EXPECT_THAT(message, HasSubstr((run / "metrics.jsonl").string()));
    EXPECT_THAT(message, HasSubstr("no step record"));
    EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"metrics.jsonl"}) << "'" << text << "'";
  }
}

// The points of every polyline of an SVG, as numbers.
std::vector<double> polyline_coordinates(const std::string& svg) {
  std::vector<double> out;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    const std::size_t begin = svg.find("points='", at) + 8, end = svg.find('\'', begin);
    std::string list = svg.substr(begin, end - begin);
    std::replace(list.begin(), list.end(), ',', ' ');
    std::istringstream in(list);
    for (std::string word; in >> word;) out.push_back(std::strtod(word.c_str(), nullptr));
  }
  return out;
}

// Class 15 of issue 22: values near the largest double (+-1e308: their range overflows to inf) gave
// -nan coordinates. Every coordinate must be a finite number inside the drawing, and the extremes
// must land on the panel's edges.
TEST(MetricsReport, ValuesNearTheLargestDoubleAreDrawnInsideThePanel) {
  ScratchDirectory run;
  std::string lines;
  for (std::int64_t s : {0, 1, 2}) {
    StepRecord r = record(s);
    r.loss = s == 0 ? 1e308 : s == 1 ? -1e308 : 0;
    r.tokens_per_s = s == 0 ? std::numeric_limits<double>::max() : -std::numeric_limits<double>::max();
    lines += step_record_json(r).dump() + "\n";
  }
  write_whole_file(run / "metrics.jsonl", lines);
  const std::string svg = file_text(write_metrics_report(run.path()));
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
  const std::vector<double> xy = polyline_coordinates(svg);
  ASSERT_EQ(xy.size(), 18u);  // 3 panels x 3 steps x (x, y)
  for (double v : xy) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, 1000.0);
  }
  // The loss panel: 1e308 at its top, -1e308 at its bottom, 0 half way.
  const double top = xy[1], bottom = xy[3], middle = xy[5];
  EXPECT_LT(top, bottom);
  EXPECT_NEAR(middle, (top + bottom) / 2, 1e-3 * (bottom - top));
}

// Each panel plots its own series, and a step written twice (a resume whose file was not cut back)
// is drawn from its last record. Loss 3, 1 (rewritten to 5), 2 and accuracy 0.25, 0.75, 0.5 both
// put step 1 highest; they differ in steps 0 and 2 (loss: 0 above 2; accuracy: 2 above 0), and a
// loss drawn from step 1's first record (1) would put it lowest.
TEST(MetricsReport, EachPanelPlotsItsSeriesAndARepeatedStepItsLastRecord) {
  ScratchDirectory run;
  std::string lines;
  const double losses[] = {3, 1, 2}, accuracies[] = {0.25, 0.75, 0.5};
  for (std::int64_t s : {0, 1, 2}) {
    StepRecord r = record(s);
    r.loss = losses[s];
    r.accuracy = accuracies[s];
    lines += step_record_json(r).dump() + "\n";
    if (s == 1) {
      r.loss = 5;
      lines += step_record_json(r).dump() + "\n";
    }
  }
  write_whole_file(run / "metrics.jsonl", lines);
  const std::vector<double> xy = polyline_coordinates(file_text(write_metrics_report(run.path())));
  ASSERT_EQ(xy.size(), 18u);  // loss, accuracy, tokens/s: 3 steps x (x, y) each; y grows downwards
  const double loss_y[] = {xy[1], xy[3], xy[5]}, accuracy_y[] = {xy[7], xy[9], xy[11]};
  EXPECT_LT(loss_y[1], loss_y[0]);  // step 1's last record (5) is the largest loss
  EXPECT_LT(loss_y[0], loss_y[2]);
  EXPECT_LT(accuracy_y[1], accuracy_y[2]);  // 0.75 above 0.5 above 0.25
  EXPECT_LT(accuracy_y[2], accuracy_y[0]);
}

// Class 8 of issue 22: a link planted at the temporary name of metrics.jsonl or report.svg pointed
// outside the run: the target was overwritten and the final name became a link out of the run.
TEST(MetricsReport, LinksPlantedAtTemporaryNamesAreNeverFollowed) {
  ScratchDirectory run, outside;
  write_whole_file(outside / "victim-metrics", "precious\n");
  write_whole_file(outside / "victim-report", "precious\n");
  std::filesystem::create_symlink(outside / "victim-metrics", run / "metrics.jsonl.tmp");
  std::filesystem::create_symlink(outside / "victim-report", run / "report.svg.tmp");
  std::string lines;
  for (std::int64_t s : {0, 1, 2}) lines += step_record_json(record(s)).dump() + "\n";
  write_whole_file(run / "metrics.jsonl", lines);
  truncate_metrics_file(run / "metrics.jsonl", 2);
  write_metrics_report(run.path());
  EXPECT_EQ(file_text(outside / "victim-metrics"), "precious\n");
  EXPECT_EQ(file_text(outside / "victim-report"), "precious\n");
  for (const char* name : {"metrics.jsonl", "report.svg"}) {
    EXPECT_FALSE(std::filesystem::is_symlink(run / name)) << name;
    EXPECT_TRUE(std::filesystem::is_regular_file(run / name)) << name;
  }
  EXPECT_EQ(read_metrics_file(run / "metrics.jsonl").size(), 2u);
}

// Class 3 of issue 22: metrics.jsonl that is a link to a device or a FIFO is refused by name (the
// report read /dev/zero until memory ran out).
TEST(MetricsReport, MetricsThatIsNotARegularFileIsRefusedNamingIt) {
  ScratchDirectory run;
  std::filesystem::create_symlink("/dev/zero", run / "metrics.jsonl");
  EXPECT_THAT(input_error_message([&] { read_metrics_file(run / "metrics.jsonl"); }),
              HasSubstr((run / "metrics.jsonl").string() + ": is a character device, not a regular file"));
  std::filesystem::remove(run / "metrics.jsonl");
  ASSERT_EQ(::mkfifo((run / "metrics.jsonl").c_str(), 0644), 0);
  EXPECT_THAT(input_error_message([&] { read_metrics_file(run / "metrics.jsonl"); }),
              HasSubstr("is a FIFO, not a regular file"));
}

}  // namespace
}  // namespace dflash
