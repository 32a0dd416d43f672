// Export and --init import (TRAINING §16): the Hugging Face layout and config.json, the round trip
// (bf16 rounding exactly), BF16/F16/F32/F64 import, and every refused config key named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "distributed/weights/drafter_export.hpp"
#include "distributed/weights/drafter_init.hpp"
#include "io/hf_checkpoint.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using nlohmann::json;
using safetensors::Dtype;
using ::testing::HasSubstr;

double bf16_rounded(double v) {
  std::byte b[2];
  safetensors::store_float_element(Dtype::BF16, v, b);
  return safetensors::load_float_element(Dtype::BF16, b);
}

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(DrafterExport, ConfigJsonIsTheHuggingFaceDrafterLayout) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "out", c, seeded_drafter_parameters(tracker, c, 3));
  const json j = read_json(dir / "out" / "config.json");
  EXPECT_EQ(j.at("architectures"), json({"DFlashDraftModel"}));
  EXPECT_EQ(j.at("dflash_config"),
            json({{"mask_token_id", c.mask_token_id}, {"target_layer_ids", c.target_layer_ids}}));
  EXPECT_EQ(j.at("block_size"), c.block_size);
  // The target's depth (4: tiny's synthetic target), not K = 2, and what transformers needs to load it.
  EXPECT_EQ(j.at("num_target_layers"), 4);
  EXPECT_EQ(j.at("auto_map"), released_auto_map());
  EXPECT_FALSE(j.contains("is_causal"));
  EXPECT_FALSE(j.at("dflash_config").contains("causal"));
  for (const char* field :
       {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
        "num_hidden_layers", "rms_norm_eps", "rope_theta", "vocab_size", "layer_types", "sliding_window"}) {
    EXPECT_EQ(j.at(field), drafter_config_to_json(c).at(field)) << field;
  }
  // Weights: every SPEC §3 name, BF16, nothing else.
  const HfCheckpoint w = HfCheckpoint::open(dir / "out");
  std::vector<std::string> names;
  for (const ParameterShape& s : drafter_parameter_shapes(c)) {
    names.push_back(s.name);
    EXPECT_EQ(w.info(s.name).dtype, Dtype::BF16) << s.name;
    EXPECT_EQ(w.info(s.name).shape, s.shape) << s.name;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(w.names(), names);
  // transformers' loader refuses a safetensors file whose "format" is not one it knows, and serving
  // stacks load the weights in the dtype config.json declares.
  EXPECT_EQ(safetensors::Reader::open_file(dir / "out" / "model.safetensors").metadata(),
            (safetensors::Metadata{{"format", "pt"}}));
  EXPECT_EQ(j.at("torch_dtype"), "bfloat16");
}

TEST(DrafterExport, WithoutTheTargetDepthIsRefusedWritingNothing) {
  const DrafterConfig c = tiny_config();  // no num_target_layers: a run that did not record it
  MemoryTracker tracker;
  ScratchDirectory dir;
  EXPECT_THAT(input_error_message([&] { export_drafter(dir / "out", c, seeded_drafter_parameters(tracker, c, 3)); }),
              HasSubstr("num_target_layers"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

TEST(DrafterExport, NonFiniteWeightIsRefusedNamingTheTensorWritingNothing) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  // NaN, both infinities, and finite master weights that bf16 rounds to infinity: 1e39, and the
  // rounding boundary itself, half an ulp above bf16's largest value (a tie, rounded to even: up).
  for (const double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e39, 0x1.ffp+127}) {
    ScratchDirectory dir;
    DrafterParameters<double> p = seeded_drafter_parameters(tracker, c, 3);
    p.layers[1].up_proj[5] = bad;
    const std::string message = input_error_message([&] { export_drafter(dir / "out", c, p); });
    EXPECT_THAT(message, HasSubstr("'layers.1.mlp.up_proj.weight'")) << bad;
    EXPECT_THAT(message, HasSubstr("element 5")) << bad;
    if (std::isfinite(bad)) {
      EXPECT_THAT(message, HasSubstr("BF16 rounds to infinity"));
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "out")) << bad;
  }
  // The largest weight bf16 holds is exported as it is, and one just below the boundary rounds to it.
  for (const double fine : {-0x1.fep+127, 0x1.fe8p+127}) {
    ScratchDirectory dir;
    DrafterParameters<double> p = seeded_drafter_parameters(tracker, c, 3);
    p.layers[1].up_proj[5] = fine;
    export_drafter(dir / "out", c, p);
    EXPECT_EQ(import_drafter_for_run(tracker, dir / "out", c).layers[1].up_proj[5], std::copysign(0x1.fep+127, fine));
  }
}

TEST(DrafterExport, ReleasedConfigKeepsWhatTheProjectDoesNotModel) {
  const DrafterConfig c = tiny_export_config();
  json released = exported_drafter_config(c);
  released.erase("auto_map");  // a released config without it stays without it
  released["bos_token_id"] = 7;
  released["x_unmodelled"] = {{"nested", {1, 2.5, nullptr}}};
  released["rope_theta"] = 10000;  // an integer, equal to the run's 10000.0: kept as written
  released["dflash_config"]["unknown_flag"] = "kept";
  const json j = exported_drafter_config(c, &released);
  EXPECT_EQ(j, released);
  EXPECT_TRUE(j.at("rope_theta").is_number_integer());
  // A modelled key the run changed is written where the released config holds it.
  DrafterConfig longer = c;
  longer.block_size = 8;
  released["dflash_config"]["block_size"] = 4;
  const json k = exported_drafter_config(longer, &released);
  EXPECT_EQ(k.at("block_size"), 8);
  EXPECT_EQ(k.at("dflash_config").at("block_size"), 8);
  EXPECT_EQ(k.at("dflash_config").at("unknown_flag"), "kept");
}

TEST(DrafterExport, ImportOfTheExportGivesTheWeightsRoundedToBf16) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  const DrafterParameters<double> p = seeded_drafter_parameters(tracker, c, 11);
  export_drafter(dir / "out", c, p);
  const DrafterParameters<double> q = import_drafter_for_run(tracker, dir / "out", c);
  std::vector<const Tensor<double>*> original;
  p.for_each([&](const std::string&, const Tensor<double>& t) { original.push_back(&t); });
  std::size_t index = 0;
  std::int64_t changed = 0;
  q.for_each([&](const std::string& name, const Tensor<double>& t) {
    const Tensor<double>& o = *original[index++];
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(t[i], bf16_rounded(o[i])) << name << " element " << i;
      changed += t[i] != o[i];
    }
  });
  EXPECT_GT(changed, 0);  // the rounding did happen: the check above is not vacuous
}

TEST(DrafterExport, ImportReadsF64AndF16WeightsExactly) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 1));
  for (Dtype dtype : {Dtype::F64, Dtype::F16, Dtype::F32}) {
    safetensors::Writer w;
    for (const ParameterShape& s : drafter_parameter_shapes(c)) {
      std::vector<double> v(static_cast<std::size_t>(shape_numel(s.shape)));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i % 7) / 8.0 - 0.25;
      w.add_floats(s.name, dtype, s.shape, v);
    }
    w.write_file(dir / "d" / "model.safetensors");
    const DrafterParameters<double> q = import_drafter_for_run(tracker, dir / "d", c);
    EXPECT_EQ(q.layers[1].gate_proj[9], double(9 % 7) / 8.0 - 0.25);
  }
}

TEST(DrafterExport, ImportWithoutATensorIsRefusedNamingIt) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 1));
  safetensors::Writer w;
  w.add_floats("fc.weight", Dtype::BF16, {c.hidden_size, c.feature_width()},
               std::vector<double>(std::size_t(c.hidden_size * c.feature_width())));
  w.write_file(dir / "d" / "model.safetensors");
  EXPECT_THAT(input_error_message([&] { import_drafter_for_run(tracker, dir / "d", c); }),
              HasSubstr("'hidden_norm.weight' is missing"));
}

TEST(DrafterExport, ImportOfANonFiniteWeightIsRefusedNamingTheElement) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 1));
  for (const double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    safetensors::Writer w;
    for (const ParameterShape& s : drafter_parameter_shapes(c)) {
      std::vector<double> v(std::size_t(shape_numel(s.shape)), 0.25);
      if (s.name == "layers.1.mlp.gate_proj.weight") v[9] = bad;
      w.add_floats(s.name, Dtype::F32, s.shape, v);
    }
    w.write_file(dir / "d" / "model.safetensors");
    const std::string message = input_error_message([&] { import_drafter_for_run(tracker, dir / "d", c); });
    EXPECT_THAT(message, HasSubstr("'layers.1.mlp.gate_proj.weight'")) << bad;
    EXPECT_THAT(message, HasSubstr("element 9")) << bad;
  }
}

// A rank's part of --init's weights (DrafterWeightsReader::read_flat) is those elements of the
// whole import: ranges cut at and next to every tensor boundary, mid-tensor and past P (zeros);
// opening reads no value, and a non-finite value is found only by a range that holds it, named by
// its element in its tensor.
TEST(DrafterExport, AFlatRangeOfTheWeightsIsThoseElementsOfTheWholeImport) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 4));
  std::vector<double> whole;
  std::vector<std::int64_t> cuts{0};
  import_drafter_for_run(tracker, dir / "d", c).for_each([&](const std::string&, const Tensor<double>& t) {
    whole.insert(whole.end(), t.values().begin(), t.values().end());
    const std::int64_t end = std::int64_t(whole.size());
    for (const std::int64_t cut : {end - 1, end, end + 1, end - t.numel() / 2}) cuts.push_back(cut);
  });
  const std::int64_t P = std::int64_t(whole.size());
  whole.resize(std::size_t(P + 7), 0.0);
  const DrafterWeightsReader reader = DrafterWeightsReader::open(dir / "d", &c);
  for (const std::int64_t a : cuts) {
    for (const std::int64_t b : cuts) {
      if (a < 0 || b < a || b > P + 7 || (b - a > 64 && a % 5 != 0)) continue;
      std::vector<double> out(std::size_t(b - a), -1.0);
      reader.read_flat(a, out);
      ASSERT_EQ(out, std::vector<double>(whole.begin() + a, whole.begin() + b)) << "[" << a << ", " << b << ")";
    }
  }
  // A NaN at element 9 of a tensor that starts at flat element `at`.
  safetensors::Writer w;
  std::int64_t at = 0, offset = 0;
  for (const ParameterShape& s : drafter_parameter_shapes(c)) {
    std::vector<double> v(std::size_t(shape_numel(s.shape)), 0.25);
    if (s.name == "layers.1.mlp.gate_proj.weight") {
      v[9] = std::nan("");
      at = offset;
    }
    w.add_floats(s.name, Dtype::F32, s.shape, v);
    offset += shape_numel(s.shape);
  }
  w.write_file(dir / "d" / "model.safetensors");
  const DrafterWeightsReader poisoned = DrafterWeightsReader::open(dir / "d", &c);
  std::vector<double> before(std::size_t(at + 9)), from(4);
  poisoned.read_flat(0, before);  // the NaN lies past it
  const std::string message = input_error_message([&] { poisoned.read_flat(at + 7, from); });
  EXPECT_THAT(message, HasSubstr("'layers.1.mlp.gate_proj.weight'"));
  EXPECT_THAT(message, HasSubstr("element 9 is nan"));
}

TEST(DrafterExport, ImportWithATensorTheConfigDoesNotModelIsRefusedNamingIt) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 1));
  safetensors::Writer w;
  for (const ParameterShape& s : drafter_parameter_shapes(c))
    w.add_floats(s.name, Dtype::BF16, s.shape, std::vector<double>(std::size_t(shape_numel(s.shape)), 0.25));
  w.add_floats("layers.0.self_attn.q_proj.bias", Dtype::BF16, {c.query_width()},
               std::vector<double>(std::size_t(c.query_width()), 0.0));
  w.write_file(dir / "d" / "model.safetensors");
  EXPECT_THAT(input_error_message([&] { import_drafter_for_run(tracker, dir / "d", c); }),
              HasSubstr("'layers.0.self_attn.q_proj.bias' is not a parameter"));
}

struct RefusedInit {
  std::string name;
  std::function<void(json&)> change;
  std::string named;
};

class InitConfigRefusal : public ::testing::TestWithParam<RefusedInit> {};

TEST_P(InitConfigRefusal, IsRefusedNamingTheKey) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  export_drafter(dir / "d", c, seeded_drafter_parameters(tracker, c, 1));
  json j = read_json(dir / "d" / "config.json");
  GetParam().change(j);
  write_whole_file(dir / "d" / "config.json", j.dump());
  EXPECT_THAT(input_error_message([&] { import_drafter_for_run(tracker, dir / "d", c); }), HasSubstr(GetParam().named));
}

INSTANTIATE_TEST_SUITE_P(
    EveryRefusedKey, InitConfigRefusal,
    ::testing::Values(
        RefusedInit{"rope_scaling",
                    [](json& j) {
                      j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
                    },
                    "rope_scaling"},
        RefusedInit{"attention_bias", [](json& j) { j["attention_bias"] = true; }, "attention_bias"},
        RefusedInit{"hidden_act", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
        RefusedInit{"is_causal", [](json& j) { j["is_causal"] = false; }, "is_causal"},
        RefusedInit{"dflash_config_causal", [](json& j) { j["dflash_config"]["causal"] = true; }, "causal"},
        RefusedInit{"use_sliding_window_false", [](json& j) { j["use_sliding_window"] = false; }, "use_sliding_window"},
        RefusedInit{"loss_decay_gamma_zero", [](json& j) { j["loss_decay_gamma"] = 0.0; }, "loss_decay_gamma"},
        RefusedInit{"loss_decay_gamma_negative", [](json& j) { j["dflash_config"]["loss_decay_gamma"] = -2.0; },
                    "loss_decay_gamma"},
        RefusedInit{"nested_disagrees", [](json& j) { j["dflash_config"]["block_size"] = 8; }, "block_size"},
        RefusedInit{"model_field_differs_from_config", [](json& j) { j["rope_theta"] = 1e6; }, "rope_theta"},
        RefusedInit{"target_layers_differ_from_config",
                    [](json& j) {
                      j["dflash_config"]["target_layer_ids"] = {2, 3};
                    },
                    "target_layer_ids"}),
    [](const auto& info) { return info.param.name; });

TEST(InitModelFields, MismatchNamesBothValues) {
  const DrafterConfig c = tiny_export_config();
  MemoryTracker tracker;
  ScratchDirectory dir;
  DrafterConfig other = c;
  other.sliding_window = 3;
  export_drafter(dir / "d", other, seeded_drafter_parameters(tracker, other, 1));
  const std::string message = input_error_message([&] { import_drafter_for_run(tracker, dir / "d", c); });
  EXPECT_THAT(message, HasSubstr("sliding_window"));
  EXPECT_THAT(message, HasSubstr("--config has 6"));
  EXPECT_THAT(message, HasSubstr("has 3"));
}

}  // namespace
}  // namespace dflash
