#include "distributed/run/disk_gate.hpp"

#include <algorithm>
#include <limits>
#include <system_error>

#include "io/errors.hpp"
#include "planner/memory_size.hpp"

namespace dflash {

namespace fs = std::filesystem;

bool saves_after_step(std::int64_t t, std::int64_t total_steps, std::int64_t save_every) {
  return t + 1 == total_steps || (save_every > 0 && (t + 1) % save_every == 0);
}

std::int64_t checkpoints_added_at_most(std::int64_t first_step, std::int64_t total_steps, std::int64_t save_every,
                                       std::int64_t keep, std::int64_t existing) {
  std::int64_t saves = 0;
  if (save_every > 0) {
    // Multiples of save_every in (first_step, total_steps], counted without a loop (total_steps
    // may be large), plus the last step's when it is not one of them.
    saves = std::max<std::int64_t>(0, total_steps / save_every - first_step / save_every);
    if (total_steps % save_every != 0 && first_step < total_steps) ++saves;
  } else if (first_step < total_steps) {
    saves = 1;
  }
  if (saves == 0) return 0;
  if (keep == 0) return saves;
  // Before the j-th save (1-based) `existing` are there for j = 1, then min(existing + j - 1, K):
  // each save leaves the K most recent. The j-th write adds one to those.
  const std::int64_t later = saves >= 2 ? std::min(existing + saves - 1, keep) + 1 : 0;
  return std::max<std::int64_t>(existing + 1, later) - existing;
}

std::uint64_t record_lines_added_at_most(std::int64_t first_step, std::int64_t total_steps, std::int64_t eval_every,
                                         std::uint64_t step_line_bytes, std::uint64_t eval_line_bytes) {
  const std::int64_t steps = std::max<std::int64_t>(0, total_steps - first_step);
  // Evaluations after steps t in [first_step, total_steps) with (t + 1) % eval_every == 0.
  const std::int64_t evals = eval_every > 0 && steps > 0 ? total_steps / eval_every - first_step / eval_every : 0;
  return std::uint64_t(steps) * step_line_bytes + std::uint64_t(evals) * eval_line_bytes;
}

std::uint64_t DiskPlan::needed() const {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const auto n = std::uint64_t(std::max<std::int64_t>(checkpoints, 0));
  if (n != 0 && checkpoint_bytes > kMax / n) return kMax;
  const std::uint64_t checkpoints_bytes = checkpoint_bytes * n;
  return record_bytes > kMax - checkpoints_bytes ? kMax : checkpoints_bytes + record_bytes;
}

std::uint64_t available_disk_bytes(const fs::path& path) {
  fs::path at = fs::absolute(path);
  std::error_code ec;
  while (!fs::exists(at, ec) && at.has_parent_path() && at.parent_path() != at) at = at.parent_path();
  const fs::space_info space = fs::space(at, ec);
  if (ec) throw_input_error("--out", str("cannot ask the free space of '", at.string(), "': ", ec.message()));
  return space.available;
}

void print_disk_plan(std::ostream& out, const DiskPlan& plan, const fs::path& run_dir, std::int64_t keep) {
  out << "dflash train: checkpoints: up to " << plan.checkpoints << " at once (--keep " << keep << ") of "
      << gb_string(plan.checkpoint_bytes) << " each, and records of up to " << gb_string(plan.record_bytes) << ", "
      << gb_string(plan.needed()) << "; " << gb_string(plan.available) << " available on the filesystem of "
      << run_dir.string() << ": " << (plan.fits() ? "fits" : "does NOT fit") << "\n";
}

void require_disk_plan_fits(const DiskPlan& plan, const fs::path& run_dir, std::int64_t keep) {
  if (plan.fits()) return;
  throw_input_error("--out", str("the run's checkpoints need up to ", gb_string(plan.needed()), " (up to ",
                                 plan.checkpoints, " at once, --keep ", keep, ", of ", gb_string(plan.checkpoint_bytes),
                                 " each, and records of up to ", gb_string(plan.record_bytes),
                                 ") and the filesystem of '", run_dir.string(), "' has ", gb_string(plan.available),
                                 " available; free space, lower --keep or raise --save-every, "
                                 "or pass --force to start anyway"));
}

}  // namespace dflash
