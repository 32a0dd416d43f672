// Checking an implementation against golden files (`dflash golden check --impl NAME`).
//
// An implementation is one function from a loaded golden (inputs, parameters, config) to the
// output/ and grad/ tensors it can compute, each with the relative error it is held to (which may
// depend on the golden's data, as SPEC §10's rule for low-precision results does). The check
// compares exactly what the implementation produced, tensor by tensor, with the golden's:
// relative error norm-wise (reference/compare.hpp); the losses and lse relative to at least the
// size of the log-partition functions they are made of (LossHeadStats::magnitude, computed from
// the golden's own stored Y: the floor belongs to the golden, not to the implementation under
// test). Adding an implementation (the CUDA loss head, say) is writing one such function.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/tolerances.hpp"
#include "golden/file.hpp"

namespace dflash {

// The reference against itself is held to kReferenceTolerance (common/tolerances.hpp, SPEC §10).
// On the machine that generated a golden the recomputation is bitwise identical (same operations
// in the same order); the bound absorbs a compiler or libm that rounds a transcendental
// differently elsewhere. Accuracy is a ratio of counts: one changed count moves it by at least
// 1/(labelled rows), far above this bound, so it is in effect compared exactly.

// What an implementation computed: output/ and grad/ tensors by SPEC §9 name (a subset is fine:
// what is absent is not compared; nothing at all is a failure), and the relative error each is
// held to (a tensor without one fails).
struct GoldenOutputs {
  GoldenResults tensors;
  std::map<std::string, double, std::less<>> tolerance;
};

// Every tensor of `tensors` held to the same `tolerance`.
GoldenOutputs with_tolerance(GoldenResults tensors, double tolerance);

struct GoldenImplementation {
  std::string name;         // what --impl selects
  std::string description;  // one line for --help and the table
  std::function<GoldenOutputs(MemoryTracker&, const Golden&)> compute;
  // Runs only on a GPU: where none is usable `golden check` reports SKIPPED with the reason
  // instead of failing every golden (a failure under DFLASH_REQUIRE_GPU=1).
  bool needs_gpu = false;
};

// The whole reference step (trunk, loss head, backward) recomputed from the stored inputs and
// anchors: every output/ and grad/ tensor, each held to 1e-12.
GoldenImplementation reference_golden_implementation();

// The reference loss head alone, from the stored Y (output/hidden): loss, ce, kl, accuracy,
// weight_sum, lse, token_loss, each held to 1e-12. The template for a loss-head-only
// implementation such as the CUDA one.
GoldenImplementation reference_loss_head_golden_implementation();

struct GoldenCheckRow {
  std::string file;    // the golden's source
  std::string tensor;  // SPEC §9 name; "(file)" when the file could not be checked at all
  double error = 0;    // relative error; infinity for a shape mismatch or a name not in the golden
  double tolerance = 0;
  std::string note;  // why a row failed, or the floor used

  bool passed() const { return error <= tolerance; }
};

// The floor below which a tensor's differences are rounding noise: `magnitude` for the losses,
// lse and token loss, 0 for everything else.
double golden_comparison_floor(std::string_view tensor, double magnitude);

// LossHeadStats::magnitude of the golden's stored Y (the floor of its losses).
double golden_loss_magnitude(const Golden& golden);

// One row per computed tensor, against the golden's tensor of the same name.
std::vector<GoldenCheckRow> compare_golden_outputs(const Golden& golden, const GoldenOutputs& computed);

// Runs the implementation on the golden and compares (an exception becomes a failed row).
std::vector<GoldenCheckRow> check_golden(const Golden& golden, const GoldenImplementation& implementation);

// Reads the file first: a file that is not a valid golden gives one failed row with the reason.
// `case_name`, when given, receives the golden's case (SPEC §9 metadata `case`: for a golden made
// at a user's weights, their files and sha256), left empty when the file cannot be read.
std::vector<GoldenCheckRow> check_golden_file(const std::filesystem::path& path,
                                              const GoldenImplementation& implementation,
                                              std::string* case_name = nullptr);

// The *.safetensors files of a directory, sorted. InputError naming the directory if it does not
// exist, is not a directory, or holds no golden.
std::vector<std::filesystem::path> golden_files_in(const std::filesystem::path& directory);

// Every tensor, metadata entry and integer input of `actual` against `expected` (regenerated
// goldens against the committed ones): metadata and integer tensors identical, float tensors
// within `tolerance` (floors as above). One row per tensor, plus one for the metadata.
std::vector<GoldenCheckRow> compare_goldens(const Golden& expected, const Golden& actual, double tolerance);

// Prints the table (file, tensor, rel err, tolerance, PASS/FAIL, note); returns the failures.
int print_golden_check_table(std::ostream& out, const std::vector<GoldenCheckRow>& rows);

}  // namespace dflash
