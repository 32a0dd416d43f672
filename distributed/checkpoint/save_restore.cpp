#include "distributed/checkpoint/save_restore.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>
#include <regex>
#include <string_view>
#include <utility>
#include <variant>

#include "io/errors.hpp"
#include "io/file_limits.hpp"
#include "io/file_read.hpp"
#include "io/file_write.hpp"
#include "io/json_fields.hpp"
#include "io/safetensors.hpp"
#include "io/sha256.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

using nlohmann::json;
namespace fs = std::filesystem;

std::string checkpoint_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

namespace {

const std::regex kCheckpointName("step-[0-9]{8}");

// model.safetensors' metadata.
const safetensors::Metadata kModelMetadata = {{"format", "pt"}};
// A part's tensors are its prefix and the SPEC §3 name: master's in model.safetensors, the
// moments' in optimizer.safetensors.
const char* tensor_prefix(OptimizerPart part) {
  switch (part) {
    case OptimizerPart::master:
      return "";
    case OptimizerPart::exp_avg:
      return "exp_avg/";
    case OptimizerPart::exp_avg_sq:
      return "exp_avg_sq/";
  }
  throw std::logic_error("checkpoint: not an optimizer part");
}

// The tensors add_flat adds under `prefix`, without their values.
void add_flat_specs(std::vector<safetensors::TensorSpec>& specs, const std::vector<ParameterShape>& shapes,
                    const std::string& prefix, safetensors::Dtype dtype) {
  for (const ParameterShape& s : shapes) specs.push_back({prefix + s.name, dtype, s.shape});
}

// The flat vector split into tensors of `shapes`, written under `prefix` + name (viewed: it must
// outlive the writer's write_file).
void add_flat(safetensors::Writer& w, const std::vector<ParameterShape>& shapes, const std::string& prefix,
              const FlatValues& values, safetensors::Dtype dtype) {
  std::visit(
      [&](const auto& flat) {
        std::size_t offset = 0;
        for (const ParameterShape& s : shapes) {
          const auto n = static_cast<std::size_t>(shape_numel(s.shape));
          if (offset + n > flat.size())
            throw std::logic_error(str("checkpoint: flat vector of ", flat.size(), " values is too short"));
          w.add_floats_view(prefix + s.name, dtype, s.shape, std::span(flat.data() + offset, n));
          offset += n;
        }
        if (offset != flat.size())
          throw std::logic_error(str("checkpoint: flat vector has ", flat.size(), " values, the config ", offset));
      },
      values);
}

// Every tensor under `prefix` is of a float dtype the reader reads exactly and of the config's shape.
void check_flat_tensors(const safetensors::Reader& r, const std::vector<ParameterShape>& shapes,
                        const std::string& prefix) {
  for (const ParameterShape& s : shapes) {
    const std::string name = prefix + s.name;
    const safetensors::TensorInfo& info = r.info(name);
    if (info.dtype != safetensors::Dtype::F64 && info.dtype != safetensors::Dtype::F32) {
      throw_input_error(str(r.source(), ": tensor '", name, "'"),
                        str("dtype ", safetensors::dtype_name(info.dtype), " is not F64 or F32"));
    }
    if (info.shape != s.shape) {
      throw_input_error(str(r.source(), ": tensor '", name, "'"),
                        str("shape ", safetensors::format_shape(info.shape), " is not the config's ",
                            safetensors::format_shape(s.shape)));
    }
  }
}

void notify(const CheckpointWriteOptions& o, CheckpointPhase phase) {
  if (o.observer) o.observer(phase);
}

}  // namespace

std::uint64_t checkpoint_bytes(const DrafterConfig& config, safetensors::Dtype precision) {
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::vector<safetensors::TensorSpec> model, optimizer;
  for (const OptimizerPart part : kOptimizerParts)
    add_flat_specs(part == OptimizerPart::master ? model : optimizer, shapes, tensor_prefix(part), precision);
  return safetensors::file_size(model, kModelMetadata) + safetensors::file_size(optimizer) + kMaxTrainerStateFileBytes;
}

std::int64_t checkpoint_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, kCheckpointName)) {
    throw_input_error(dir.string(), "is not a checkpoint directory (step-<8 digits>)");
  }
  return std::stoll(name.substr(5));
}

std::vector<fs::path> run_checkpoints(const fs::path& run_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    if (e.is_directory() && std::regex_match(e.path().filename().string(), kCheckpointName)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path latest = run_dir / kLatestFileName;
  std::error_code ec;
  if (!fs::exists(latest, ec)) return std::nullopt;
  std::string name = read_regular_file(latest, kMaxLatestFileBytes);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  if (!std::regex_match(name, kCheckpointName)) {
    throw_input_error(latest.string(), str("'", name, "' is not a checkpoint name (step-<8 digits>)"));
  }
  return run_dir / name;
}

fs::path write_run_checkpoint(const fs::path& run_dir, const DrafterConfig& config, const RunCheckpoint& c,
                              const CheckpointWriteOptions& options) {
  if (c.first != 0) throw std::logic_error("checkpoint: a slice (first > 0) cannot be written");
  RunCheckpoint counters = c;  // without its vectors, which are given as values
  counters.master = counters.exp_avg = counters.exp_avg_sq = {};
  return write_run_checkpoint_from(
      run_dir, config, counters, [&c](OptimizerPart part) -> FlatValues { return c.flat(part); }, options);
}

fs::path write_run_checkpoint_from(const fs::path& run_dir, const DrafterConfig& config, const RunCheckpoint& c,
                                   const CheckpointValues& values, const CheckpointWriteOptions& options) {
  if (!c.master.empty() || !c.exp_avg.empty() || !c.exp_avg_sq.empty())
    throw std::logic_error("checkpoint: the flat vectors are given as values, not in the checkpoint");
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  const std::string name = checkpoint_name(c.step);
  const fs::path final_dir = run_dir / name, tmp_dir = run_dir / (name + ".tmp");
  fs::create_directories(run_dir);
  // Left by an interrupted write: never complete, never named by latest. remove_all does not follow
  // a link planted there; make_directory then creates a fresh directory or fails.
  fs::remove_all(tmp_dir);
  make_directory(tmp_dir);
  notify(options, CheckpointPhase::temporary_directory_made);

  // The parts in kOptimizerParts' order, master's values released before the moments are asked
  // for. Each file is flushed to disk, as every write of io/file_write.hpp, and hashed as written.
  std::string model_hash, optimizer_hash;
  {
    const FlatValues master = values(OptimizerPart::master);
    safetensors::Writer model;
    for (const auto& [key, value] : kModelMetadata) model.set_metadata(key, value);
    add_flat(model, shapes, tensor_prefix(OptimizerPart::master), master, options.precision);
    model_hash = model.write_file(tmp_dir / kModelFileName);
  }
  notify(options, CheckpointPhase::model_written);
  {
    const FlatValues exp_avg = values(OptimizerPart::exp_avg);
    const FlatValues exp_avg_sq = values(OptimizerPart::exp_avg_sq);
    safetensors::Writer optimizer;
    add_flat(optimizer, shapes, tensor_prefix(OptimizerPart::exp_avg), exp_avg, options.precision);
    add_flat(optimizer, shapes, tensor_prefix(OptimizerPart::exp_avg_sq), exp_avg_sq, options.precision);
    optimizer_hash = optimizer.write_file(tmp_dir / kOptimizerFileName);
  }
  notify(options, CheckpointPhase::optimizer_written);

  json state = {{"format", kCheckpointFormat},
                {"version", kCheckpointVersion},
                {"step", c.step},
                {"data_cursor", {{"epoch", c.data_cursor.epoch}, {"position", c.data_cursor.position}}},
                {"seed", c.seed},
                {"tokens_seen", c.tokens_seen},
                {"config", c.config},
                {"world_size", c.world_size},
                {"sha256", {{kModelFileName, model_hash}, {kOptimizerFileName, optimizer_hash}}}};
  if (!c.data_set.is_null()) state["data_set"] = c.data_set;
  write_file_atomically(tmp_dir / kTrainerStateFileName, state.dump(2) + "\n");
  notify(options, CheckpointPhase::state_written);

  // A complete directory of this step that `latest` does not name (a run killed between this
  // rename and the `latest` update, then resumed from the one before) is replaced.
  fs::remove_all(final_dir);
  rename_path(tmp_dir, final_dir);
  sync_directory(run_dir);
  notify(options, CheckpointPhase::renamed);

  write_file_atomically(run_dir / kLatestFileName, name + "\n");
  notify(options, CheckpointPhase::latest_written);

  if (options.keep > 0) {
    const std::vector<fs::path> all = run_checkpoints(run_dir);
    for (std::size_t i = 0; i + std::size_t(options.keep) < all.size(); ++i) {
      if (all[i] != final_dir) fs::remove_all(all[i]);
    }
  }
  return final_dir;
}

namespace {

// trainer_state.json's keys, each checked: the right kind and range, the step equal to the
// directory's name. A resume takes these values as the run's state, so none is trusted.
struct TrainerState {
  RunCheckpoint counters;  // every field but the flat vectors
  json hashes;
};

TrainerState read_state(const fs::path& dir) {
  const fs::path path = dir / kTrainerStateFileName;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_input_error("checkpoint", str("'", dir.string(), "' is not a directory"));
  if (!fs::exists(fs::symlink_status(path, ec))) throw_input_error(path.string(), "is missing");
  const json state = read_json_file(path, kMaxTrainerStateFileBytes, "checkpoint state");
  if (!state.is_object()) throw_input_error(path.string(), "is not a JSON object");
  for (const char* key :
       {"format", "version", "step", "data_cursor", "seed", "tokens_seen", "config", "world_size", "sha256"}) {
    if (!state.contains(key)) throw_input_error(path.string(), str("key '", key, "' is missing"));
  }
  const auto field = [&](std::string_view key) { return str(path.string(), ": ", key); };
  // An integer in [low, high]: fractions, strings and values past int64 are refused by name.
  const auto integer = [&](const json& v, std::string_view key, std::int64_t low, std::int64_t high) {
    const bool fits =
        v.is_number_integer() && !(v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(high));
    if (!fits || v.get<std::int64_t>() < low || v.get<std::int64_t>() > high) {
      throw_input_error(field(key), str(v.dump(), " is not an integer in [", low, ", ", high, "]"));
    }
    return v.get<std::int64_t>();
  };
  constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
  if (state.at("format") != kCheckpointFormat) {
    throw_input_error(field("format"), str(state.at("format").dump(), " is not \"", kCheckpointFormat, "\""));
  }
  if (state.at("version") != kCheckpointVersion) {
    throw_input_error(field("version"), str(state.at("version").dump(), " is not ", kCheckpointVersion,
                                            " (written by another version of dflash?)"));
  }
  TrainerState t;
  RunCheckpoint& c = t.counters;
  c.step = integer(state.at("step"), "step", 0, kMaxCheckpointStep);
  if (const std::string name = dir.filename().string(); std::regex_match(name, kCheckpointName)) {
    if (checkpoint_name(c.step) != name) {
      throw_input_error(field("step"), str(c.step, " is not the step of its directory ", name));
    }
  }
  const json& cursor = state.at("data_cursor");
  if (!cursor.is_object() || !cursor.contains("epoch") || !cursor.contains("position")) {
    throw_input_error(field("data_cursor"), str(cursor.dump(), " is not {\"epoch\": e, \"position\": p}"));
  }
  c.data_cursor = {integer(cursor.at("epoch"), "data_cursor.epoch", 0, kInt64Max),
                   integer(cursor.at("position"), "data_cursor.position", 0, kInt64Max)};
  const json& seed = state.at("seed");
  if (!seed.is_number_unsigned()) throw_input_error(field("seed"), str(seed.dump(), " is not a non-negative integer"));
  c.seed = seed.get<std::uint64_t>();
  c.tokens_seen = integer(state.at("tokens_seen"), "tokens_seen", 0, kInt64Max);
  c.world_size = int(integer(state.at("world_size"), "world_size", 1, std::numeric_limits<int>::max()));
  c.config = state.at("config");
  if (!c.config.is_object()) throw_input_error(field("config"), "is not a JSON object");
  if (state.contains("data_set")) c.data_set = state.at("data_set");
  t.hashes = state.at("sha256");
  if (!t.hashes.is_object()) throw_input_error(field("sha256"), "is not a JSON object");
  return t;
}

}  // namespace

json checkpoint_config_json(const fs::path& dir) { return read_state(dir).counters.config; }

RunCheckpointReader::RunCheckpointReader(RunCheckpoint state, safetensors::Reader model, safetensors::Reader optimizer,
                                         std::vector<ParameterShape> shapes)
    : state_(std::move(state)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      shapes_(std::move(shapes)),
      sizes_(parameter_sizes(shapes_)),
      count_(std::accumulate(sizes_.begin(), sizes_.end(), std::int64_t(0))) {}

RunCheckpointReader RunCheckpointReader::open(const fs::path& dir, const DrafterConfig& config,
                                              CheckpointHashes check) {
  TrainerState state = read_state(dir);
  const fs::path state_path = dir / kTrainerStateFileName;
  const json& hashes = state.hashes;
  for (const char* file : {kModelFileName, kOptimizerFileName}) {
    const fs::path path = dir / file;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw_input_error(path.string(), "is missing");
    if (!hashes.contains(file) || !hashes.at(file).is_string()) {
      throw_input_error(state_path.string(), str("has no sha256 for ", file));
    }
    if (check == CheckpointHashes::verified_by_another_rank) continue;
    const std::string want = hashes.at(file).get<std::string>(), got = sha256_file_hex(path);
    if (got != want) {
      throw_input_error(path.string(), str("sha256 ", got, " does not match ", want, " recorded in ",
                                           kTrainerStateFileName, " (the file is damaged or was altered)"));
    }
  }
  try {
    std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
    auto model = safetensors::Reader::open_file(dir / kModelFileName);
    auto optimizer = safetensors::Reader::open_file(dir / kOptimizerFileName);
    for (const OptimizerPart part : kOptimizerParts)
      check_flat_tensors(part == OptimizerPart::master ? model : optimizer, shapes, tensor_prefix(part));
    return RunCheckpointReader(std::move(state.counters), std::move(model), std::move(optimizer), std::move(shapes));
  } catch (const json::exception& e) {
    throw_input_error(state_path.string(), str("malformed: ", e.what()));
  }
}

void RunCheckpointReader::read(OptimizerPart part, std::int64_t first, std::span<double> out) const {
  if (first < 0 || first + std::int64_t(out.size()) > count_) {
    throw std::logic_error(str("checkpoint read [", first, ", +", out.size(), ") of ", count_, " values"));
  }
  const safetensors::Reader& r = part == OptimizerPart::master ? model_ : optimizer_;
  const std::string prefix = tensor_prefix(part);
  for (const FlatRun& run : flat_runs(sizes_, first, std::int64_t(out.size()))) {
    r.read_float_elements(prefix + shapes_[run.tensor].name, std::uint64_t(run.at),
                          out.subspan(std::size_t(run.position), std::size_t(run.length)));
  }
}

RunCheckpoint read_run_checkpoint(const fs::path& dir, const DrafterConfig& config, FlatSlice slice,
                                  CheckpointHashes hashes) {
  const std::int64_t P = drafter_parameter_count(config);
  if (slice.first < 0 || slice.count < -1) {
    throw std::logic_error(str("checkpoint slice [", slice.first, ", +", slice.count, ") of ", P, " values"));
  }
  const RunCheckpointReader reader = RunCheckpointReader::open(dir, config, hashes);
  RunCheckpoint c = reader.state();
  // A ZeRO-1 shard may lie past P, in the padding, wholly: its slice is empty, at P.
  const std::int64_t first = std::min(slice.first, P);
  const std::int64_t end = slice.count < 0 ? P : std::min(P, first + slice.count);
  c.first = first;
  // Each vector made at its size and read into its place: a vector grown tensor by tensor, and a
  // vector of doubles per tensor, left freed blocks of about P doubles in the heap, where a resumed
  // rank kept them for the whole run (bench/results/host_memory.md).
  for (const OptimizerPart part : kOptimizerParts) {
    std::vector<double>& v = c.flat(part);
    v.resize(std::size_t(end - first));
    reader.read(part, first, v);
  }
  return c;
}

}  // namespace dflash
