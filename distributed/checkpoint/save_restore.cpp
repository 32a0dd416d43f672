#include "distributed/checkpoint/save_restore.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string_view>
#include <utility>

#include "io/errors.hpp"
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

// Flushes a file or directory to disk: a rename is only durable once what it renames is.
void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(str("cannot open ", path.string(), " to sync it: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(str("cannot sync ", path.string(), ": ", std::strerror(errno)));
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error(str("cannot write ", path.string()));
  out.close();
  sync_path(path);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error(path.string(), "is missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The flat vector split into tensors of `shapes`, written under `prefix` + name.
void add_flat(safetensors::Writer& w, const std::vector<ParameterShape>& shapes, const std::string& prefix,
              const std::vector<double>& flat, safetensors::Dtype dtype) {
  std::size_t offset = 0;
  for (const ParameterShape& s : shapes) {
    const auto n = static_cast<std::size_t>(shape_numel(s.shape));
    if (offset + n > flat.size())
      throw std::logic_error(str("checkpoint: flat vector of ", flat.size(), " values is too short"));
    w.add_floats(prefix + s.name, dtype, s.shape, std::span<const double>(flat.data() + offset, n));
    offset += n;
  }
  if (offset != flat.size())
    throw std::logic_error(str("checkpoint: flat vector has ", flat.size(), " values, the config ", offset));
}

std::vector<double> read_flat(const safetensors::Reader& r, const std::vector<ParameterShape>& shapes,
                              const std::string& prefix) {
  std::vector<double> flat;
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
    const std::vector<double> v = r.doubles(name);
    flat.insert(flat.end(), v.begin(), v.end());
  }
  return flat;
}

void notify(const CheckpointWriteOptions& o, CheckpointPhase phase) {
  if (o.observer) o.observer(phase);
}

}  // namespace

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
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  if (!std::regex_match(name, kCheckpointName)) {
    throw_input_error(latest.string(), str("'", name, "' is not a checkpoint name (step-<8 digits>)"));
  }
  return run_dir / name;
}

fs::path write_run_checkpoint(const fs::path& run_dir, const DrafterConfig& config, const RunCheckpoint& c,
                              const CheckpointWriteOptions& options) {
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  const std::string name = checkpoint_name(c.step);
  const fs::path final_dir = run_dir / name, tmp_dir = run_dir / (name + ".tmp");
  fs::create_directories(run_dir);
  fs::remove_all(tmp_dir);  // left by an interrupted write: never complete, never named by latest
  fs::create_directory(tmp_dir);
  notify(options, CheckpointPhase::temporary_directory_made);

  safetensors::Writer model;
  model.set_metadata("format", "pt");
  add_flat(model, shapes, "", c.master, options.precision);
  model.write_file(tmp_dir / kModelFileName);
  sync_path(tmp_dir / kModelFileName);
  notify(options, CheckpointPhase::model_written);

  safetensors::Writer optimizer;
  add_flat(optimizer, shapes, "exp_avg/", c.exp_avg, options.precision);
  add_flat(optimizer, shapes, "exp_avg_sq/", c.exp_avg_sq, options.precision);
  optimizer.write_file(tmp_dir / kOptimizerFileName);
  sync_path(tmp_dir / kOptimizerFileName);
  notify(options, CheckpointPhase::optimizer_written);

  const json state = {{"format", "dflash-checkpoint"},
                      {"version", 1},
                      {"step", c.step},
                      {"data_cursor", {{"epoch", c.data_cursor.epoch}, {"position", c.data_cursor.position}}},
                      {"seed", c.seed},
                      {"tokens_seen", c.tokens_seen},
                      {"config", c.config},
                      {"world_size", c.world_size},
                      {"sha256",
                       {{kModelFileName, sha256_file_hex(tmp_dir / kModelFileName)},
                        {kOptimizerFileName, sha256_file_hex(tmp_dir / kOptimizerFileName)}}}};
  write_text(tmp_dir / kTrainerStateFileName, state.dump(2) + "\n");
  sync_path(tmp_dir);
  notify(options, CheckpointPhase::state_written);

  // A complete directory of this step that `latest` does not name (a run killed between this
  // rename and the `latest` update, then resumed from the one before) is replaced.
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  sync_path(run_dir);
  notify(options, CheckpointPhase::renamed);

  const fs::path latest_tmp = run_dir / (std::string(kLatestFileName) + ".tmp");
  write_text(latest_tmp, name + "\n");
  fs::rename(latest_tmp, run_dir / kLatestFileName);
  sync_path(run_dir);
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

json read_state(const fs::path& dir) {
  const fs::path path = dir / kTrainerStateFileName;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_input_error("checkpoint", str("'", dir.string(), "' is not a directory"));
  if (!fs::exists(path, ec)) throw_input_error(path.string(), "is missing");
  const json state = json::parse(read_text(path), nullptr, false);
  if (state.is_discarded() || !state.is_object()) throw_input_error(path.string(), "is not a JSON object");
  for (const char* key : {"step", "data_cursor", "seed", "tokens_seen", "config", "world_size", "sha256"}) {
    if (!state.contains(key)) throw_input_error(path.string(), str("key '", key, "' is missing"));
  }
  return state;
}

// An integer of trainer_state.json that `Int` holds; nlohmann's get<> would truncate 1.5, wrap an
// out-of-range integer and convert 1e300 with undefined behaviour (found by fuzz/trainer_state).
template <class Int>
Int state_integer(const json& value, const fs::path& path, std::string_view key) {
  bool fits = false;
  if (value.is_number_unsigned()) {
    fits = std::cmp_less_equal(value.get<std::uint64_t>(), std::numeric_limits<Int>::max());
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    fits = std::cmp_greater_equal(v, std::numeric_limits<Int>::min()) &&
           std::cmp_less_equal(v, std::numeric_limits<Int>::max());
  }
  if (!fits) {
    throw_input_error(path.string(), str("'", key, "' is ", value.dump(), ", not an integer in [",
                                         std::numeric_limits<Int>::min(), ", ", std::numeric_limits<Int>::max(), "]"));
  }
  return value.get<Int>();
}

}  // namespace

json checkpoint_config_json(const fs::path& dir) { return read_state(dir).at("config"); }

RunCheckpoint read_run_checkpoint(const fs::path& dir, const DrafterConfig& config) {
  const json state = read_state(dir);
  const fs::path state_path = dir / kTrainerStateFileName;
  const json& hashes = state.at("sha256");
  for (const char* file : {kModelFileName, kOptimizerFileName}) {
    const fs::path path = dir / file;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw_input_error(path.string(), "is missing");
    if (!hashes.contains(file) || !hashes.at(file).is_string()) {
      throw_input_error(state_path.string(), str("has no sha256 for ", file));
    }
    const std::string want = hashes.at(file).get<std::string>(), got = sha256_file_hex(path);
    if (got != want) {
      throw_input_error(path.string(), str("sha256 ", got, " does not match ", want, " recorded in ",
                                           kTrainerStateFileName, " (the file is damaged or was altered)"));
    }
  }
  try {
    RunCheckpoint c;
    c.step = state_integer<std::int64_t>(state.at("step"), state_path, "step");
    c.data_cursor = {
        state_integer<std::int64_t>(state.at("data_cursor").at("epoch"), state_path, "data_cursor.epoch"),
        state_integer<std::int64_t>(state.at("data_cursor").at("position"), state_path, "data_cursor.position")};
    c.seed = state_integer<std::uint64_t>(state.at("seed"), state_path, "seed");
    c.tokens_seen = state_integer<std::int64_t>(state.at("tokens_seen"), state_path, "tokens_seen");
    c.config = state.at("config");
    c.world_size = state_integer<int>(state.at("world_size"), state_path, "world_size");
    const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
    const auto model = safetensors::Reader::open_file(dir / kModelFileName);
    const auto optimizer = safetensors::Reader::open_file(dir / kOptimizerFileName);
    c.master = read_flat(model, shapes, "");
    c.exp_avg = read_flat(optimizer, shapes, "exp_avg/");
    c.exp_avg_sq = read_flat(optimizer, shapes, "exp_avg_sq/");
    return c;
  } catch (const json::exception& e) {
    throw_input_error(state_path.string(), str("malformed: ", e.what()));
  }
}

}  // namespace dflash
