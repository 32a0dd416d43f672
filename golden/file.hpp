// A golden file (SPEC §9): one drafter training step, inputs and results, in a safetensors file
// that the Python `safetensors` package reads.
//
// `__metadata__`: format = "dflash-golden", version, case, config (the drafter config as JSON,
// training fields included, loadable by drafter_config_from_json), seed (= the config's seed),
// step. Tensors, floats F64 and integers I64, for a batch of nseq sequences of equal S whose
// global sequence indices are 0 .. nseq-1 (sequence offset 0):
//   input/tokens [nseq,S]  input/loss_mask [nseq,S]  input/target_features [nseq,S,K H]
//   input/teacher_hidden [nseq,S,H]  input/anchors [nseq,N]  input/keep [nseq,N]
//   frozen/embed_tokens.weight [V,H]  frozen/lm_head.weight [V,H]  param/<name>
//   output/loss ce kl accuracy weight_sum []  output/hidden [nseq,T,H]  output/lse [nseq,T]
//   output/token_loss [nseq,T]  output/weights [nseq,T]  grad/<name>
// Exactly these names: a file with one missing, one more, or any dtype or shape off is rejected.
// output/lse and output/token_loss are 0 on rows with w01 = 0 (no label, no teacher: SPEC §4).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"
#include "reference/drafter.hpp"

namespace dflash {

inline constexpr std::string_view kGoldenFormat = "dflash-golden";
inline constexpr std::string_view kGoldenVersion = "1";

// One float result (an output/ or grad/ tensor), C order.
struct GoldenTensor {
  Shape shape;
  std::vector<double> values;
};

// Results by SPEC §9 name ("output/loss", "grad/fc.weight", ...).
using GoldenResults = std::map<std::string, GoldenTensor, std::less<>>;

// A golden in memory: everything the file holds. Movable into a new object, never assigned over
// one (its tensors must go before the tracker that counts them).
struct Golden {
  Golden() = default;
  Golden(Golden&&) = default;
  Golden& operator=(Golden&&) = delete;

  std::string source;  // the file it was read from (or what generated it), for messages
  std::string case_name;
  DrafterConfig config;    // config.seed is the metadata's seed
  std::uint32_t step = 0;  // optimizer step: the RNG counter's last word (SPEC §4, §6)
  // Counts the tensors below; declared first so that it outlives them.
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();
  DrafterBatch<double> batch;  // explicit anchors and keep: the ones the step used
  DrafterParameters<double> params;
  FrozenWeights<double> frozen;
  GoldenResults results;  // every output/ and grad/ tensor

  std::int64_t num_sequences() const { return batch.num_sequences(); }
  std::int64_t context_length() const { return batch.context_length(); }
  std::int64_t anchor_slots() const { return batch.anchors->dim(1); }  // N
  // The step's options: the config's policies, this step, sequence offset 0.
  DrafterStepOptions step_options() const { return drafter_step_options(config, step, 0); }
};

// The name, dtype and shape of every tensor of a golden with these dimensions, in SPEC §9 order.
struct GoldenTensorSpec {
  std::string name;
  safetensors::Dtype dtype;
  Shape shape;
};
std::vector<GoldenTensorSpec> golden_tensor_specs(const DrafterConfig& config, std::int64_t nseq, std::int64_t S,
                                                  std::int64_t N);

// The file's tensor table against a list: exactly these names, dtypes and shapes; InputError
// naming the file and the first tensor that is missing, extra or off.
void check_golden_tensor_table(const safetensors::Reader& reader, const std::vector<GoldenTensorSpec>& specs);

// The output/ and grad/ tensors of a drafter step, by SPEC §9 name.
GoldenResults golden_results_of(const DrafterStepResult<double>& step);

// The scalar output as a double (output/loss, ...). Throws std::out_of_range for a name absent.
double golden_scalar(const GoldenResults& results, std::string_view name);

// Every float tensor of a golden by name (inputs, frozen, param/, output/, grad/), sorted by name.
struct GoldenFloatView {
  std::string name;
  const Shape* shape;
  std::span<const double> values;
};
std::vector<GoldenFloatView> golden_float_tensors(const Golden& golden);

// Every integer tensor (tokens, loss mask, anchors, keep) as int64, sorted by name.
struct GoldenIntegerTensor {
  std::string name;
  Shape shape;
  std::vector<std::int64_t> values;
};
std::vector<GoldenIntegerTensor> golden_integer_tensors(const Golden& golden);

// The SPEC §9 metadata of a golden.
safetensors::Metadata golden_metadata(const Golden& golden);

// The file's bytes (deterministic: the same golden always gives the same bytes), and the file,
// written atomically (io/safetensors_writer.hpp). std::logic_error if the golden does not
// hold exactly the SPEC §9 tensors (a generator bug, not bad input).
std::vector<std::byte> golden_bytes(const Golden& golden);
void write_golden(const Golden& golden, const std::filesystem::path& path);

// Reads and validates a golden: metadata, config, every tensor's presence, dtype and shape, and
// the batch and parameters as the drafter step would check them. Throws dflash::InputError
// naming the file and the problem.
Golden read_golden(const std::filesystem::path& path);
Golden golden_from_reader(const safetensors::Reader& reader);

}  // namespace dflash
