// `dflash golden generate --config FILE --weights DIR`: a golden at a Hugging Face drafter
// directory's parameters. The weights are really used (a golden at them is the reference step on
// exactly the exported bf16 values, not the seeded init's), the provenance is in `case`, and every
// refusal of the trainer's --init import is the golden's too, naming the file and --weights.

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "distributed/weights/drafter_export.hpp"
#include "golden/check.hpp"
#include "golden/compare.hpp"
#include "golden/request.hpp"
#include "io/sha256.hpp"
#include "tests/golden/golden_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using golden_testing::input_error_of;
using golden_testing::ScratchDirectory;
using nlohmann::json;
using safetensors::Dtype;
using ::testing::HasSubstr;
using testing_support::CliRun;

const std::filesystem::path kTinyConfig = std::filesystem::path(DFLASH_SOURCE_DIR) / "configs/tiny.json";

// The depth of tiny's synthetic target (`data synth`): export needs it, a golden does not.
constexpr std::int64_t kTinyTargetDepth = 4;

GoldenRequest tiny_request() {
  GoldenRequest r;
  r.config = load_drafter_config(kTinyConfig);
  r.case_name = "tiny";
  r.sequences = 2;
  r.step = 1;
  return r;
}

double bf16_rounded(double v) {
  std::byte b[2];
  safetensors::store_float_element(Dtype::BF16, v, b);
  return safetensors::load_float_element(Dtype::BF16, b);
}

// `dflash export`'s directory of the parameters.
void export_parameters(const std::filesystem::path& dir, const DrafterParameters<double>& params) {
  DrafterConfig c = tiny_request().config;
  c.num_target_layers = kTinyTargetDepth;
  export_drafter(dir, c, params);
}

// The seeded golden of the tiny request, and the directory of its parameters exported.
struct Exported {
  ScratchDirectory dir;
  Golden seeded = generate_golden(golden_request_case(tiny_request()));
  std::filesystem::path weights() const { return dir / "drafter"; }
  Exported() { export_parameters(weights(), seeded.params); }
  GoldenCase at_weights() const {
    GoldenRequest r = tiny_request();
    r.weights = weights();
    return golden_request_case(r);
  }
};

TEST(GoldenWeights, AGoldenAtExportedWeightsIsTheReferenceStepOnTheirBf16Values) {
  Exported e;
  const Golden at = generate_golden(e.at_weights());

  // The parameters are the export's: the seeded values rounded to bf16, not the seeded values.
  std::int64_t rounded = 0;
  e.seeded.params.for_each([&](const std::string& name, const Tensor<double>& seeded) {
    const Tensor<double>* mine = nullptr;
    at.params.for_each([&](const std::string& n, const Tensor<double>& t) {
      if (n == name) mine = &t;
    });
    ASSERT_NE(mine, nullptr) << name;
    for (std::int64_t i = 0; i < seeded.numel(); ++i) {
      ASSERT_EQ((*mine)[i], bf16_rounded(seeded[i])) << name << " element " << i;
      rounded += (*mine)[i] != seeded[i];
    }
  });
  EXPECT_GT(rounded, 0);

  // Inputs and the target's frozen weights are the seeded golden's, anchors included.
  for (const GoldenIntegerTensor& t : golden_integer_tensors(e.seeded)) {
    for (const GoldenIntegerTensor& u : golden_integer_tensors(at)) {
      if (u.name == t.name) {
        EXPECT_EQ(u.values, t.values) << t.name;
      }
    }
  }
  const std::vector<GoldenFloatView> seeded_floats = golden_float_tensors(e.seeded);
  for (const GoldenFloatView& t : golden_float_tensors(at)) {
    if (!t.name.starts_with("input/") && !t.name.starts_with("frozen/")) continue;
    for (const GoldenFloatView& u : seeded_floats) {
      if (u.name == t.name) {
        EXPECT_TRUE(std::ranges::equal(u.values, t.values)) << t.name;
      }
    }
  }

  // The results are the reference step on those values, bit for bit, and not the seeded golden's.
  MemoryTracker& tracker = *e.seeded.tracker;
  DrafterParameters<double> expected_params =
      make_drafter_parameters<double>(tracker, e.seeded.config, MemoryCategory::parameters);
  expected_params.for_each([&](const std::string& name, Tensor<double>& t) {
    e.seeded.params.for_each([&](const std::string& n, const Tensor<double>& s) {
      if (n != name) return;
      for (std::int64_t i = 0; i < s.numel(); ++i) t[i] = bf16_rounded(s[i]);
    });
  });
  const GoldenResults expected = golden_results_of(
      drafter_step(tracker, e.seeded.config, expected_params, e.seeded.frozen, e.seeded.batch, at.step_options()));
  ASSERT_EQ(at.results.size(), expected.size());
  for (const auto& [name, t] : expected) {
    EXPECT_EQ(at.results.at(name).values, t.values) << name;
  }
  EXPECT_NE(at.results.at("output/hidden").values, e.seeded.results.at("output/hidden").values);
  EXPECT_NE(golden_scalar(at.results, "output/loss"), golden_scalar(e.seeded.results, "output/loss"));

  // `case` names the weight file by its hash, and survives the file.
  EXPECT_EQ(at.case_name,
            "tiny (weights model.safetensors sha256 " + sha256_file_hex(e.weights() / "model.safetensors") + ")");
  write_golden(at, e.dir / "at.safetensors");
  const Golden back = read_golden(e.dir / "at.safetensors");
  EXPECT_EQ(back.case_name, at.case_name);
  for (const GoldenCheckRow& row : check_golden(back, reference_golden_implementation())) {
    EXPECT_TRUE(row.passed()) << row.tensor << " " << row.error << " " << row.note;
  }
}

TEST(GoldenWeights, OtherWeightsGiveAnotherGolden) {
  Exported e;
  MemoryTracker tracker;
  export_parameters(e.dir / "other",
                    init_drafter_parameters<double>(tracker, e.seeded.config, 12345, e.at_weights().norm_jitter));
  GoldenCase c = e.at_weights();
  c.weights = e.dir / "other";
  const Golden other = generate_golden(c);
  const Golden at = generate_golden(e.at_weights());
  EXPECT_NE(other.case_name, at.case_name);  // another hash
  for (const char* name : {"output/hidden", "grad/fc.weight"}) {
    const std::vector<double>& a = at.results.at(name).values;
    const std::vector<double>& b = other.results.at(name).values;
    double largest = 0;
    for (std::size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a[i] - b[i]));
    EXPECT_GT(largest, 1e-3) << name;  // unrelated weights, not a rounding apart
  }
}

TEST(GoldenWeights, ShardedWeightsAreRecordedShardByShard) {
  Exported e;
  // The export's tensors split over two shards under an index, as large released drafters ship.
  const safetensors::Reader whole = safetensors::Reader::open_file(e.weights() / "model.safetensors");
  safetensors::Writer first, second;
  json weight_map = json::object();
  for (const std::string& name : whole.names()) {
    const bool in_first = name.starts_with("layers.0.");
    safetensors::TensorData t = whole.tensor(name);
    (in_first ? first : second).add_bytes(name, t.info.dtype, t.info.shape, t.bytes);
    weight_map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  first.write_file(e.weights() / "model-00001-of-00002.safetensors");
  second.write_file(e.weights() / "model-00002-of-00002.safetensors");
  std::filesystem::remove(e.weights() / "model.safetensors");
  safetensors::testing::write_whole_file(e.weights() / "model.safetensors.index.json",
                                         json({{"metadata", json::object()}, {"weight_map", weight_map}}).dump());
  const Golden sharded = generate_golden(e.at_weights());
  EXPECT_EQ(sharded.case_name, "tiny (weights model-00001-of-00002.safetensors sha256 " +
                                   sha256_file_hex(e.weights() / "model-00001-of-00002.safetensors") +
                                   ", model-00002-of-00002.safetensors sha256 " +
                                   sha256_file_hex(e.weights() / "model-00002-of-00002.safetensors") + ")");
  // The same values as the single file: only the record of where they came from differs.
  Exported single;
  const Golden at = generate_golden(single.at_weights());
  for (const auto& [name, t] : at.results) EXPECT_EQ(sharded.results.at(name).values, t.values) << name;
}

// ---- every refusal of the import, naming the file and --weights ------------------------------------

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// model.safetensors of what `add` writes for each tensor of the config.
void write_weights(const std::filesystem::path& dir,
                   const std::function<void(safetensors::Writer&, const ParameterShape&)>& add) {
  safetensors::Writer w;
  for (const ParameterShape& s : drafter_parameter_shapes(tiny_request().config)) add(w, s);
  w.write_file(dir / "model.safetensors");
}

std::vector<double> filled(const safetensors::Shape& shape, double value) {
  return std::vector<double>(std::size_t(shape_numel(shape)), value);
}

TEST(GoldenWeights, AConfigThatDisagreesIsRefusedNamingTheFieldAndTheFile) {
  Exported e;
  json j = read_json(e.weights() / "config.json");
  j["rope_theta"] = 500000.0;
  safetensors::testing::write_whole_file(e.weights() / "config.json", j.dump());
  const std::string message = input_error_of([&] { generate_golden(e.at_weights()); });
  EXPECT_THAT(message, HasSubstr("rope_theta"));
  EXPECT_THAT(message, HasSubstr((e.weights() / "config.json").string()));
  EXPECT_THAT(message, HasSubstr("--weights"));
}

TEST(GoldenWeights, AnUnknownTensorIsRefusedNamingItAndTheFile) {
  Exported e;
  write_weights(e.weights(), [](safetensors::Writer& w, const ParameterShape& s) {
    w.add_floats(s.name, Dtype::BF16, s.shape, filled(s.shape, 0.25));
    if (s.name == "fc.weight") w.add_floats("lm_head.weight", Dtype::BF16, {64, 16}, filled({64, 16}, 0.0));
  });
  const std::string message = input_error_of([&] { generate_golden(e.at_weights()); });
  EXPECT_THAT(message, HasSubstr("'lm_head.weight' is not a parameter"));
  EXPECT_THAT(message, HasSubstr("--weights " + (e.weights() / "model.safetensors").string()));
}

TEST(GoldenWeights, AMissingTensorIsRefusedNamingItAndTheDirectory) {
  Exported e;
  write_weights(e.weights(), [](safetensors::Writer& w, const ParameterShape& s) {
    if (s.name != "norm.weight") w.add_floats(s.name, Dtype::BF16, s.shape, filled(s.shape, 0.25));
  });
  const std::string message = input_error_of([&] { generate_golden(e.at_weights()); });
  EXPECT_THAT(message, HasSubstr("--weights " + e.weights().string()));
  EXPECT_THAT(message, HasSubstr("tensor 'norm.weight' is missing"));
}

TEST(GoldenWeights, AWrongShapeIsRefusedNamingTheTensorAndTheFile) {
  Exported e;
  write_weights(e.weights(), [](safetensors::Writer& w, const ParameterShape& s) {
    safetensors::Shape shape = s.shape;
    if (s.name == "layers.1.mlp.down_proj.weight") std::swap(shape[0], shape[1]);  // transposed
    w.add_floats(s.name, Dtype::BF16, shape, filled(shape, 0.25));
  });
  const std::string message = input_error_of([&] { generate_golden(e.at_weights()); });
  EXPECT_THAT(message,
              HasSubstr((e.weights() / "model.safetensors").string() + ": tensor 'layers.1.mlp.down_proj.weight'"));
  EXPECT_THAT(message, HasSubstr("shape [32, 16] is not [16, 32]"));
}

TEST(GoldenWeights, ANonFiniteWeightIsRefusedNamingTheElementAndTheFile) {
  Exported e;
  write_weights(e.weights(), [](safetensors::Writer& w, const ParameterShape& s) {
    std::vector<double> v = filled(s.shape, 0.25);
    if (s.name == "layers.0.mlp.up_proj.weight") v[7] = std::nan("");
    w.add_floats(s.name, Dtype::F32, s.shape, v);
  });
  const std::string message = input_error_of([&] { generate_golden(e.at_weights()); });
  EXPECT_THAT(message,
              HasSubstr((e.weights() / "model.safetensors").string() + ": tensor 'layers.0.mlp.up_proj.weight'"));
  EXPECT_THAT(message, HasSubstr("element 7 is nan"));
}

TEST(GoldenWeights, ADirectoryThatIsNotOneIsRefusedNamingTheFlag) {
  Exported e;
  GoldenCase c = e.at_weights();
  c.weights = e.dir / "absent";
  EXPECT_THAT(input_error_of([&] { generate_golden(c); }), HasSubstr("invalid --weights: '"));
}

// ---- as a user runs it ---------------------------------------------------------------------------

using testing_support::run_dflash;

std::string generate_flags(const Exported& e, const std::filesystem::path& out) {
  return str("golden generate --config '", kTinyConfig.string(), "' --sequences 2 --step 1 --weights '",
             e.weights().string(), "' --out '", out.string(), "'");
}

TEST(GoldenWeightsCli, GenerateWritesTheLibrarysBytesAndCompareNamesTheWeights) {
  Exported e;
  const CliRun gen = run_dflash(generate_flags(e, e.dir / "g.safetensors"));
  ASSERT_EQ(gen.exit_code, 0) << gen.out << gen.err;
  EXPECT_THAT(gen.out, HasSubstr("parameters from " + e.weights().string()));
  EXPECT_EQ(safetensors::testing::read_whole_file(e.dir / "g.safetensors"),
            golden_bytes(generate_golden(e.at_weights())));

  const std::string file = (e.dir / "g.safetensors").string();
  const CliRun cmp = run_dflash("golden compare --golden '" + file + "' --result '" + file + "'");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;
  const std::string hash = sha256_file_hex(e.weights() / "model.safetensors");
  EXPECT_THAT(cmp.out, HasSubstr("(case tiny (weights model.safetensors sha256 " + hash + "))"));
  const CliRun js = run_dflash("golden compare --json --golden '" + file + "' --result '" + file + "'");
  EXPECT_EQ(nlohmann::json::parse(js.out).at("case"), "tiny (weights model.safetensors sha256 " + hash + ")");
  // golden check says which weights each golden it recomputes was made at
  const CliRun check = run_dflash("golden check --dir '" + e.dir.path().string() + "'");
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_THAT(check.out, HasSubstr("g.safetensors: case tiny (weights model.safetensors sha256 " + hash + ")"));
}

TEST(GoldenWeightsCli, ARefusedDirectoryExitsTwoNamingTheFileAndWritesNothing) {
  Exported e;
  json j = read_json(e.weights() / "config.json");
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  safetensors::testing::write_whole_file(e.weights() / "config.json", j.dump());
  const CliRun r = run_dflash(generate_flags(e, e.dir / "g.safetensors"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("num_hidden_layers"));
  EXPECT_THAT(r.err, HasSubstr((e.weights() / "config.json").string()));
  EXPECT_FALSE(std::filesystem::exists(e.dir / "g.safetensors"));
}

TEST(GoldenWeightsCli, WeightsNeedAConfig) {
  Exported e;
  const CliRun r =
      run_dflash("golden generate --weights '" + e.weights().string() + "' --out '" + (e.dir / "g").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--config"));
}

}  // namespace
}  // namespace dflash
