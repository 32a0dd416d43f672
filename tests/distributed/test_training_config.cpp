// TRAINING §12's training fields: defaults, round trip, and one refusal per bad value, each
// naming the field, the value and the source.
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "distributed/training_config.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

nlohmann::json minimal() { return {{"total_steps", 100}, {"global_batch_sequences", 8}, {"max_context", 4096}}; }

TEST(TrainingConfig, DefaultsAreTrainingSection12s) {
  const TrainingConfig c = training_config_from_json(minimal());
  EXPECT_EQ(c.learning_rate, 6e-4);
  EXPECT_EQ(c.min_learning_rate, 0.0);
  EXPECT_EQ(c.warmup_steps, 0);
  EXPECT_EQ(c.adam_beta1, 0.9);
  EXPECT_EQ(c.adam_beta2, 0.95);
  EXPECT_EQ(c.adam_epsilon, 1e-8);
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.max_grad_norm, 1.0);
  EXPECT_EQ(c.micro_steps, 1);
  EXPECT_EQ(c.zero_stage, 1);
  EXPECT_EQ(c.total_steps, 100);
  EXPECT_EQ(c.global_batch_sequences, 8);
  EXPECT_EQ(c.max_context, 4096);
}

TEST(TrainingConfig, RoundTripsThroughJsonAndIgnoresModelFields) {
  nlohmann::json j = minimal();
  j.update({{"learning_rate", 1e-3},
            {"min_learning_rate", 1e-5},
            {"warmup_steps", 10},
            {"adam_beta1", 0.8},
            {"adam_beta2", 0.99},
            {"adam_epsilon", 1e-6},
            {"weight_decay", 0.1},
            {"max_grad_norm", 0.0},
            {"micro_steps", 4},
            {"zero_stage", 0},
            {"hidden_size", 5120}});
  const TrainingConfig c = training_config_from_json(j);
  const TrainingConfig back = training_config_from_json(training_config_to_json(c));
  EXPECT_EQ(training_config_to_json(back), training_config_to_json(c));
  // Every field read back as given, none left at its default: a field the writer drops would come
  // back as the default on resume (checkpoints record the config this way), and the run would go on
  // with another beta or learning rate than it started with.
  for (const auto& [key, value] : j.items()) {
    if (key != "hidden_size") {
      EXPECT_EQ(training_config_to_json(back).at(key), value) << key;
    }
  }
  EXPECT_EQ(c.warmup_steps, 10);
  EXPECT_EQ(c.zero_stage, 0);
  EXPECT_EQ(c.max_grad_norm, 0.0);
}

struct BadField {
  const char* field;
  nlohmann::json value;  // null: the field is removed
  const char* expected;  // part of the message
};

TEST(TrainingConfig, EveryBadValueIsRefusedNamingTheFieldAndValue) {
  const BadField cases[] = {
      {"total_steps", nullptr, "total_steps in my.json: is missing"},
      {"global_batch_sequences", nullptr, "global_batch_sequences in my.json: is missing"},
      {"max_context", nullptr, "max_context in my.json: is missing"},
      {"learning_rate", -1e-3, "learning_rate in my.json: -0.001 must lie in"},
      {"learning_rate", "fast", "learning_rate in my.json: \"fast\" is not a number"},
      {"min_learning_rate", 1.0, "min_learning_rate in my.json: 1 must lie in [0, 0.00059999999999999995]"},
      {"warmup_steps", -1, "warmup_steps in my.json: -1 must be at least 0"},
      {"warmup_steps", 1.5, "warmup_steps in my.json: 1.5 is not an integer"},
      {"total_steps", 0, "total_steps in my.json: 0 must be at least 1"},
      {"adam_beta1", 1.0, "adam_beta1 in my.json: 1 must lie in [0, 1)"},
      {"adam_beta2", -0.5, "adam_beta2 in my.json: -0.5 must lie in [0, 1)"},
      {"adam_epsilon", 0.0, "adam_epsilon in my.json: 0 must be finite and > 0"},
      {"weight_decay", -0.1, "weight_decay in my.json: -0.10000000000000001 must lie in"},
      {"max_grad_norm", -1.0, "max_grad_norm in my.json: -1 must lie in"},
      {"global_batch_sequences", 0, "global_batch_sequences in my.json: 0 must be at least 1"},
      {"global_batch_sequences", 1 << 21, "global_batch_sequences in my.json: 2097152 exceeds 2^20"},
      {"micro_steps", 0, "micro_steps in my.json: 0 must be at least 1"},
      {"zero_stage", 2, "zero_stage in my.json: 2 is not 0 or 1"},
      {"max_context", 0, "max_context in my.json: 0 must be at least 1"},
  };
  for (const BadField& c : cases) {
    nlohmann::json j = minimal();
    if (c.value.is_null()) {
      j.erase(c.field);
    } else {
      j[c.field] = c.value;
    }
    try {
      training_config_from_json(j, "my.json");
      ADD_FAILURE() << c.field << " = " << c.value.dump() << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
}

TEST(TrainingConfig, ANonObjectIsRefused) {
  EXPECT_THROW(training_config_from_json(nlohmann::json::array(), "x.json"), InputError);
}

}  // namespace
}  // namespace dflash
