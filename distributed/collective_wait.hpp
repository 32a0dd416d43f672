// Waiting for a collective without waiting forever. A collective ends only when every rank has
// joined it, so one rank that stopped (stuck in I/O, a debugger, a hung device) or died where no
// connection breaks (ranks of one node talk through shared memory) holds all the others, and the
// job hangs for as long as its allocation lasts instead of failing. Both communicators that can
// wait for a peer - MPI over CPU ranks (mpi_communicator.cpp) and NCCL over GPU ranks
// (cuda/stream_wait.hpp) - start the collective, then wait here: polls until it is done, asks
// between polls whether the library has seen a failure, and gives up after a limit set by an
// environment variable. Pure logic over callables, so the CPU tests drive it with fakes
// (tests/distributed/test_collective_wait.cpp).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "io/errors.hpp"

namespace dflash {

enum class CollectivePoll { done, busy };

// The limit, in seconds, that the environment variable `variable` sets through its `value` (null or
// empty: `default_s`): a finite number >= 0, where 0 means no limit. Throws InputError naming the
// variable otherwise: '60s' or '1 h' read as 60 or 1 would set a limit other than the one meant.
inline double wait_limit_seconds(std::string_view variable, const char* value, double default_s) {
  if (value == nullptr || *value == '\0') return default_s;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(value, &end);
  if (end == value || *end != '\0' || errno == ERANGE || !std::isfinite(seconds) || seconds < 0) {
    throw_input_error(variable,
                      str("'", value, "' is not a number of seconds >= 0 (0: no limit; unset: ", default_s, ")"));
  }
  return seconds;
}

// What a wait gives up on: the variable that sets its limit, the limit (seconds; 0: none), and why
// a collective can still be unfinished then (the end of the failure's message).
struct WaitLimit {
  std::string_view variable;
  double seconds = 0;
  std::string_view likely_cause;
};

// The most one gap between two polls adds to a wait's time. A running wait polls every few
// microseconds, a descheduled one within milliseconds; a longer gap is mostly time this process
// did not run - the whole job suspended (Slurm's scontrol suspend, gang scheduling and preemption
// stop every rank with SIGSTOP and resume it later) - not a peer that kept it waiting. Capped, not
// dropped: a poll loop that itself takes longer (a call that blocks, a wedged driver) still
// reaches the limit, after limit x gap / kPausedGapS of wall time (60 s polls: 30 times the limit).
inline constexpr double kPausedGapS = 2.0;

// Returns once `poll()` says done; on an error of its own `poll()` throws (NCCL) or ends the job
// (MPI). While busy,
// `async_error()` is asked after every poll, and `now_s()` (seconds on a steady clock): the first
// error it gives, or the limit passed in the time the wait has run (each gap between polls counted
// up to kPausedGapS), is handed to `fail(reason)`, which must not return (it ends what it can of the
// collective, so that the peers' waits end too, and throws or ends the job).
template <class Poll, class AsyncError, class Fail, class Now>
void wait_for_collective(Poll poll, AsyncError async_error, Fail fail, const WaitLimit& limit, Now now_s) {
  double waited = 0, last = now_s();
  while (poll() == CollectivePoll::busy) {
    if (const std::optional<std::string> error = async_error()) {
      fail(*error);
      return;  // not reached
    }
    const double now = now_s();
    waited += std::min(now - last, kPausedGapS);
    last = now;
    if (limit.seconds > 0 && waited > limit.seconds) {
      fail(str("not finished after ", limit.seconds, " s (", limit.variable, "): ", limit.likely_cause));
      return;  // not reached
    }
    std::this_thread::yield();
  }
}

// For waits whose library reports failures only through poll() (MPI).
inline std::optional<std::string> no_async_error() { return std::nullopt; }

// Seconds on the steady clock: what the communicators pass as now_s.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dflash
