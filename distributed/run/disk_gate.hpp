// The disk gate of `dflash train`: before anything is written, the run works out how many bytes
// its checkpoints will add to --out's filesystem at the most, and refuses (unless --force) when the
// filesystem has fewer available. A run that would fill its disk at its tenth hour's checkpoint is
// told at its first second, as the plan gate tells it of device memory (plan_gate.hpp).
//
// What is counted: the checkpoints (checkpoint_bytes: 20.8 GB each at full scale in fp32) and the
// lines metrics.jsonl and eval.jsonl gain, each at its longest (step_record.hpp: under 2 KB a step at B = 32).
// The free space may change under the run: the gate is the arithmetic of the run's own writes, not
// a reservation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

#include "io/safetensors_dtype.hpp"

namespace dflash {

// Whether the run saves after step t (0-based) of total_steps: after every save_every-th step (0:
// none) and after the last. A run stopped early (a signal, a shard that fails) saves once more
// and ends, which never adds to the count: the saves after it are not made.
bool saves_after_step(std::int64_t t, std::int64_t total_steps, std::int64_t save_every);

// How many checkpoints a run from first_step to total_steps adds to --out at once, at the most,
// beyond the `existing` ones there (a resumed run's). keep 0 keeps every checkpoint: each save
// adds one. keep K > 0 removes all but the K most recent after each save, once the new one is
// complete: while one is written K + 1 can exist, and the existing ones count among the K.
std::int64_t checkpoints_added_at_most(std::int64_t first_step, std::int64_t total_steps, std::int64_t save_every,
                                       std::int64_t keep, std::int64_t existing);

// The bytes the lines of metrics.jsonl (one a step) and eval.jsonl (one every eval_every-th step;
// 0: none) add from first_step to total_steps, each line at its longest.
std::uint64_t record_lines_added_at_most(std::int64_t first_step, std::int64_t total_steps, std::int64_t eval_every,
                                         std::uint64_t step_line_bytes, std::uint64_t eval_line_bytes);

struct DiskPlan {
  std::uint64_t checkpoint_bytes = 0;  // one checkpoint, at the most (save_restore.hpp)
  std::int64_t checkpoints = 0;        // added at once, at the most
  std::uint64_t available = 0;         // on --out's filesystem, to this user
  std::uint64_t record_bytes = 0;      // metrics.jsonl and eval.jsonl lines, at the most
  std::uint64_t needed() const;        // checkpoint_bytes x checkpoints + record_bytes (saturating)
  bool fits() const { return needed() <= available; }
};

// The bytes available to this user on the filesystem that holds `path`, or would hold it: that of
// its nearest existing ancestor (--out may not exist yet). Throws InputError naming --out when
// none can be asked.
std::uint64_t available_disk_bytes(const std::filesystem::path& path);

// One line: the checkpoints' bytes against the available ones, and the verdict.
void print_disk_plan(std::ostream& out, const DiskPlan& plan, const std::filesystem::path& run_dir, std::int64_t keep);

// Throws InputError naming --out, the bytes and what to change, when the plan does not fit.
void require_disk_plan_fits(const DiskPlan& plan, const std::filesystem::path& run_dir, std::int64_t keep);

}  // namespace dflash
