// `dflash data check DIR [--config FILE]`: the feature-set validation of a training run, alone.
// `dflash data synth --config FILE --out DIR`: a synthetic target and learnable feature set.
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "distributed/data/feature_dataset.hpp"
#include "distributed/data/synthetic_set.hpp"
#include "io/errors.hpp"

namespace dflash::app {
namespace {

struct DataFlags {
  std::string dir, config, out, feature_dtype = "BF16";
  SyntheticDataSpec spec;
};

void run_check(const DataFlags& f) {
  const bool with_config = !f.config.empty();
  const FeatureSetShape shape = with_config ? FeatureSetShape::of(load_drafter_config(f.config))
                                            : FeatureSetShape::declared_by(FeatureDataset::shard_files(f.dir).front());
  const FeatureDataset d = FeatureDataset::open(f.dir, shape);
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < d.num_sequences(); ++i) longest = std::max(longest, d.sequence_length(i));
  std::cout << "dflash data check " << f.dir << ": OK: " << d.num_shards() << " shard(s), " << d.num_sequences()
            << " sequences, " << d.num_rows() << " rows, longest " << longest << ", hidden_size " << shape.hidden_size
            << ", K " << shape.target_layer_ids.size()
            << (with_config ? "" : " (token ids not checked against a vocabulary: pass --config)") << "\n";
}

}  // namespace

void add_data_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("data", "Feature shards (TRAINING §14): check a set, or write a synthetic one");
  cmd->require_subcommand(1);
  auto f = std::make_shared<DataFlags>();

  auto* check = cmd->add_subcommand("check", "Validate every shard of a feature set (what `dflash train` refuses)");
  check->add_option("dir", f->dir, "Directory of *.safetensors shards")->required();
  check->add_option("--config", f->config, "Drafter config: check H, K and token ids against it");
  check->callback([f, &exit_code] {
    run_check(*f);
    exit_code = 0;
  });

  auto* synth = cmd->add_subcommand("synth", "Write a synthetic target checkpoint and a learnable feature set");
  synth->add_option("--config", f->config, "Drafter config")->required();
  synth->add_option("--out", f->out, "New directory: <out>/target and <out>/features")->required();
  synth->add_option("--sequences", f->spec.sequences, "Sequences (default 64)");
  synth->add_option("--shards", f->spec.shards, "Shard files (default 2)");
  synth->add_option("--min-length", f->spec.min_length, "Shortest sequence (default 16)");
  synth->add_option("--max-length", f->spec.max_length, "Longest sequence (default 32)");
  synth->add_option("--noise", f->spec.noise, "Probability of a random next token (default 0.1)");
  synth->add_option("--seed", f->spec.seed, "Seed (default 1)");
  synth->add_option("--feature-dtype", f->feature_dtype, "BF16, F16 or F32 (default BF16)");
  synth->callback([f, &exit_code] {
    const auto dtype = safetensors::dtype_from_name(f->feature_dtype);
    if (!dtype) throw_input_error("--feature-dtype", str("'", f->feature_dtype, "' is not BF16, F16 or F32"));
    f->spec.feature_dtype = *dtype;
    write_synthetic_data(load_drafter_config(f->config), f->spec, f->out);
    std::cout << "dflash data synth: wrote " << f->out << "/target and " << f->out << "/features (" << f->spec.sequences
              << " sequences in " << f->spec.shards << " shards)\n";
    exit_code = 0;
  });
}

}  // namespace dflash::app
