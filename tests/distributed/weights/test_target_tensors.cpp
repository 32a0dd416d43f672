// The frozen embedding and lm_head from a target's Hugging Face directory (TRAINING §16): single
// file or sharded, tied embeddings, BF16/F16/F32 converted exactly; missing or mis-sized tensors
// refused naming file and tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "distributed/weights/target_tensors.hpp"
#include "io/hf_checkpoint.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

using namespace train_testing;
using safetensors::Dtype;
using ::testing::HasSubstr;

std::vector<double> values(std::int64_t n, double scale) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[std::size_t(i)] = scale * double((i * 37) % 101 - 50) / 64.0;  // exact in every dtype
  return v;
}

TEST(TargetWeights, SingleFileInEachFloatDtype) {
  const DrafterConfig c = tiny_config();
  const std::int64_t n = c.vocab_size * c.hidden_size;
  for (Dtype dtype : {Dtype::BF16, Dtype::F16, Dtype::F32}) {
    ScratchDirectory dir;
    safetensors::Writer w;
    w.add_floats(kTargetEmbeddingName, dtype, {c.vocab_size, c.hidden_size}, values(n, 1));
    w.add_floats(kTargetLmHeadName, dtype, {c.vocab_size, c.hidden_size}, values(n, -0.5));
    w.add_floats("model.layers.0.mlp.up_proj.weight", dtype, {2, 2}, values(4, 1));  // ignored
    w.write_file(dir / "model.safetensors");
    MemoryTracker tracker;
    const FrozenWeights<double> f = load_target_weights(tracker, dir.path(), c);
    EXPECT_EQ(std::vector<double>(f.embed_tokens.span().begin(), f.embed_tokens.span().end()), values(n, 1));
    EXPECT_EQ(std::vector<double>(f.lm_head.span().begin(), f.lm_head.span().end()), values(n, -0.5));
  }
}

TEST(TargetWeights, ShardedWithIndexAndTiedEmbeddings) {
  const DrafterConfig c = tiny_config();
  const std::int64_t n = c.vocab_size * c.hidden_size;
  ScratchDirectory dir;
  safetensors::Writer a, b;
  a.add_floats(kTargetEmbeddingName, Dtype::BF16, {c.vocab_size, c.hidden_size}, values(n, 1));
  b.add_floats(kTargetLmHeadName, Dtype::F32, {c.vocab_size, c.hidden_size}, values(n, 2));
  a.write_file(dir / "model-00001-of-00002.safetensors");
  b.write_file(dir / "model-00002-of-00002.safetensors");
  write_whole_file(dir / "model.safetensors.index.json",
                   R"({"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                       "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  MemoryTracker tracker;
  FrozenWeights<double> f = load_target_weights(tracker, dir.path(), c);
  EXPECT_EQ(f.lm_head[5], values(n, 2)[5]);
  // Tied: the embedding is used as lm_head, and lm_head.weight (present or not) is not read.
  write_whole_file(dir / "config.json", R"({"tie_word_embeddings": true})");
  f = load_target_weights(tracker, dir.path(), c);
  EXPECT_EQ(std::vector<double>(f.lm_head.span().begin(), f.lm_head.span().end()), values(n, 1));
}

TEST(TargetWeights, MissingLmHeadIsRefusedNamingIt) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  safetensors::Writer w;
  w.add_floats(kTargetEmbeddingName, Dtype::BF16, {c.vocab_size, c.hidden_size},
               values(c.vocab_size * c.hidden_size, 1));
  w.write_file(dir / "model.safetensors");
  MemoryTracker tracker;
  const std::string message = input_error_message([&] { load_target_weights(tracker, dir.path(), c); });
  EXPECT_THAT(message, HasSubstr("'lm_head.weight' is missing"));
  EXPECT_THAT(message, HasSubstr(dir.path().string()));
}

TEST(TargetWeights, WrongVocabOrHiddenSizeIsRefusedNamingTensorAndShapes) {
  const DrafterConfig c = tiny_config();
  for (const safetensors::Shape& shape :
       {safetensors::Shape{c.vocab_size + 1, c.hidden_size}, safetensors::Shape{c.vocab_size, 8}}) {
    ScratchDirectory dir;
    safetensors::Writer w;
    w.add_floats(kTargetEmbeddingName, Dtype::BF16, shape, values(shape[0] * shape[1], 1));
    w.add_floats(kTargetLmHeadName, Dtype::BF16, shape, values(shape[0] * shape[1], 1));
    w.write_file(dir / "model.safetensors");
    MemoryTracker tracker;
    const std::string message = input_error_message([&] { load_target_weights(tracker, dir.path(), c); });
    EXPECT_THAT(message, HasSubstr("'model.embed_tokens.weight'"));
    EXPECT_THAT(message, HasSubstr(safetensors::format_shape(shape)));
    EXPECT_THAT(message, HasSubstr("[64, 16]"));
  }
}

TEST(TargetWeights, NonFiniteValueIsRefusedNamingTensorAndElement) {
  // A NaN in the frozen lm_head would make every teacher softmax NaN; one in the embedding, every
  // step whose block holds that token.
  const DrafterConfig c = tiny_config();
  const std::int64_t n = c.vocab_size * c.hidden_size;
  for (const char* tensor : {kTargetEmbeddingName, kTargetLmHeadName}) {
    for (const double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
      ScratchDirectory dir;
      safetensors::Writer w;
      for (const char* name : {kTargetEmbeddingName, kTargetLmHeadName}) {
        std::vector<double> v = values(n, 1);
        if (std::string_view(name) == tensor) v[17] = bad;
        w.add_floats(name, Dtype::F32, {c.vocab_size, c.hidden_size}, v);
      }
      w.write_file(dir / "model.safetensors");
      MemoryTracker tracker;
      const std::string message = input_error_message([&] { load_target_weights(tracker, dir.path(), c); });
      EXPECT_THAT(message, HasSubstr(str("'", tensor, "'"))) << bad;
      EXPECT_THAT(message, HasSubstr("element 17")) << bad;
    }
  }
}

// A target larger than one piece (kFrozenPieceElements): opening reads no value, a read of any
// range gives those elements of the whole tensor (across a piece boundary too), a whole load
// assembles the pieces in order, and a non-finite value past the first piece is named by its
// element in the whole tensor, whichever piece finds it.
TEST(TargetWeights, PiecesReadOnlyWhatIsAskedAndNameElementsInTheWholeTensor) {
  DrafterConfig c = tiny_config();
  c.vocab_size = kFrozenPieceElements / c.hidden_size + 37;  // 2 pieces, the second short
  const std::int64_t n = c.vocab_size * c.hidden_size;
  ASSERT_GT(n, kFrozenPieceElements);
  ScratchDirectory dir;
  std::vector<double> lm = values(n, -0.5);
  const std::int64_t bad = kFrozenPieceElements + 5;
  lm[std::size_t(bad)] = std::nan("");
  safetensors::Writer w;
  w.add_floats(kTargetEmbeddingName, Dtype::BF16, {c.vocab_size, c.hidden_size}, values(n, 1));
  w.add_floats(kTargetLmHeadName, Dtype::F32, {c.vocab_size, c.hidden_size}, lm);
  w.write_file(dir / "model.safetensors");
  const TargetWeights target = TargetWeights::open(dir.path(), c);  // a NaN in a tensor is not read yet
  const std::vector<double> e = values(n, 1);
  std::vector<double> out(10);
  target.read(FrozenTensor::embed_tokens, kFrozenPieceElements - 4, out);
  EXPECT_EQ(out, std::vector<double>(e.begin() + kFrozenPieceElements - 4, e.begin() + kFrozenPieceElements + 6));
  target.read(FrozenTensor::lm_head, 3, out);
  EXPECT_EQ(out, std::vector<double>(lm.begin() + 3, lm.begin() + 13));
  const std::string message =
      input_error_message([&] { target.read(FrozenTensor::lm_head, kFrozenPieceElements, out); });
  EXPECT_THAT(message, HasSubstr("model.safetensors: tensor 'lm_head.weight'"));
  EXPECT_THAT(message, HasSubstr(str("element ", bad, " is nan")));
  MemoryTracker tracker;
  EXPECT_THAT(input_error_message([&] { load_target_weights(tracker, dir.path(), c); }),
              HasSubstr(str("element ", bad, " is nan")));
  // Without the NaN, a whole load is the pieces in order.
  lm[std::size_t(bad)] = 0.0;
  safetensors::Writer clean;
  clean.add_floats(kTargetEmbeddingName, Dtype::BF16, {c.vocab_size, c.hidden_size}, e);
  clean.add_floats(kTargetLmHeadName, Dtype::F32, {c.vocab_size, c.hidden_size}, lm);
  clean.write_file(dir / "model.safetensors");
  const FrozenWeights<double> f = load_target_weights(tracker, dir.path(), c);
  EXPECT_EQ(std::vector<double>(f.embed_tokens.span().begin(), f.embed_tokens.span().end()), e);
  EXPECT_EQ(std::vector<double>(f.lm_head.span().begin(), f.lm_head.span().end()), lm);
}

TEST(TargetWeights, IntegerDtypeIsRefused) {
  const DrafterConfig c = tiny_config();
  ScratchDirectory dir;
  safetensors::Writer w;
  const std::vector<std::int64_t> zeros(std::size_t(c.vocab_size * c.hidden_size), 0);
  w.add_integers(kTargetEmbeddingName, Dtype::I32, {c.vocab_size, c.hidden_size}, zeros);
  w.add_integers(kTargetLmHeadName, Dtype::I32, {c.vocab_size, c.hidden_size}, zeros);
  w.write_file(dir / "model.safetensors");
  MemoryTracker tracker;
  EXPECT_THAT(input_error_message([&] { load_target_weights(tracker, dir.path(), c); }), HasSubstr("dtype I32"));
}

// ---- the target's depth: num_hidden_layers, which every other source must agree with ----

TEST(TargetDepth, ReadFromNumHiddenLayersOrTextConfig) {
  ScratchDirectory dir;
  EXPECT_EQ(target_num_hidden_layers(dir.path()), std::nullopt);  // no config.json
  write_whole_file(dir / "config.json", R"({"hidden_size": 16})");
  EXPECT_EQ(target_num_hidden_layers(dir.path()), std::nullopt);
  write_whole_file(dir / "config.json", R"({"num_hidden_layers": 36})");
  EXPECT_EQ(target_num_hidden_layers(dir.path()), 36);
  // A multimodal target (Qwen3.6-27B's layout) keeps it under text_config.
  write_whole_file(dir / "config.json", R"({"text_config": {"num_hidden_layers": 64}})");
  EXPECT_EQ(target_num_hidden_layers(dir.path()), 64);
}

TEST(TargetDepth, NotAPositiveIntegerIsRefusedNamingTheFile) {
  for (const char* bad : {"0", "-3", "2.5", "\"36\"", "true"}) {
    ScratchDirectory dir;
    write_whole_file(dir / "config.json", std::string(R"({"num_hidden_layers": )") + bad + "}");
    const std::string message = input_error_message([&] { target_num_hidden_layers(dir.path()); });
    EXPECT_THAT(message, HasSubstr((dir / "config.json").string() + ": num_hidden_layers")) << bad;
    EXPECT_THAT(message, HasSubstr("is not a positive integer")) << bad;
  }
}

TEST(TargetDepth, TargetConfigAndInitMustAgree) {
  ScratchDirectory dir;
  write_whole_file(dir / "config.json", R"({"num_hidden_layers": 36})");
  DrafterConfig config = tiny_config(), init = tiny_config();
  EXPECT_EQ(resolve_target_depth({config, "run.json", dir.path()}), 36);
  config.num_target_layers = 36;
  init.num_target_layers = 36;
  EXPECT_EQ(resolve_target_depth({config, "run.json", dir.path(), &init, "init/config.json"}), 36);
  // Where the target does not say, the config or --init does.
  ScratchDirectory silent;
  EXPECT_EQ(resolve_target_depth({config, "run.json", silent.path(), &init, "init/config.json"}), 36);

  config.num_target_layers = 5;  // K of the full-scale drafter: the old, wrong meaning
  std::string message = input_error_message([&] { resolve_target_depth({config, "run.json", dir.path()}); });
  EXPECT_THAT(message, HasSubstr("num_hidden_layers of --target " + (dir / "config.json").string() + " is 36"));
  EXPECT_THAT(message, HasSubstr("num_target_layers in run.json is 5"));
  config.num_target_layers.reset();
  init.num_target_layers = 40;
  message = input_error_message([&] {
    resolve_target_depth({config, "run.json", dir.path(), &init, "init/config.json"});
  });
  EXPECT_THAT(message, HasSubstr("is 36"));
  EXPECT_THAT(message, HasSubstr("num_target_layers in --init init/config.json is 40"));
}

TEST(TargetDepth, UnknownEverywhereIsRefusedNamingThePlaces) {
  ScratchDirectory dir;
  const DrafterConfig config = tiny_config();
  const std::string message = input_error_message([&] { resolve_target_depth({config, "run.json", dir.path()}); });
  EXPECT_THAT(message, HasSubstr("the target's layer count is unknown"));
  EXPECT_THAT(message, HasSubstr((dir / "config.json").string()));
  EXPECT_THAT(message, HasSubstr("run.json"));
}

}  // namespace
}  // namespace dflash
