// Waiting for a stream that runs NCCL collectives without waiting forever for a failed one. When a
// peer dies or the network fails mid-collective, NCCL reports it as the communicator's
// asynchronous error (ncclCommGetAsyncError) while the collective's kernel never finishes, so
// cudaStreamSynchronize would block for good and the job would hang instead of failing. The wait
// polls the stream and, while it is busy, the communicator's error. Ranks on one node exchange
// through shared memory and peer-to-peer copies, where a dead process breaks no connection: NCCL
// may never report it, nor a rank that stopped (stuck in I/O, a debugger). So the wait also has a
// limit: a stream still busy after it fails as well. Pure logic over callables, so the CPU tests
// drive it with fakes (tests/distributed/cuda/test_stream_wait.cpp); the NCCL communicator
// (nccl_communicator.cpp) passes cudaStreamQuery, ncclCommGetAsyncError and a steady clock.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "io/errors.hpp"

namespace dflash {

enum class StreamPoll { done, busy };

// The environment variable that sets the limit, in seconds (0: none).
inline constexpr const char* kCollectiveTimeoutVariable = "DFLASH_NCCL_TIMEOUT_S";
// Its default: 30 minutes. A wait spans one collective and, for the gradient buckets, the backward
// they follow: seconds at full scale, the ranks brought together each step by an MPI all-reduce.
// The lead's long host work - writing a checkpoint (20.8 GB at full scale), a resume's hash
// check - happens while its peers wait in MPI, not here (dflash train puts a barrier before each
// checkpoint part's gather). Far above any healthy wait, far below a hung job's lost hours.
inline constexpr double kDefaultCollectiveTimeoutS = 1800.0;

// The limit `value` (the variable's value; null or empty: the default) sets: a finite number of
// seconds >= 0. Throws InputError naming the variable otherwise.
inline double collective_timeout_seconds(const char* value) {
  if (value == nullptr || *value == '\0') return kDefaultCollectiveTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(value, &end);
  if (end == value || *end != '\0' || errno == ERANGE || !std::isfinite(seconds) || seconds < 0) {
    throw_input_error(
        kCollectiveTimeoutVariable,
        str("'", value, "' is not a number of seconds >= 0 (0: no limit; unset: ", kDefaultCollectiveTimeoutS, ")"));
  }
  return seconds;
}

// Returns once `poll()` says done. `poll()` throws on an error of the stream itself. While busy,
// `async_error()` is asked after every poll, and `now_s()` (seconds on a steady clock): the first
// error the communicator gives, or the limit passed since the wait began (timeout_s > 0), is handed
// to `fail(reason)`, which must throw (it aborts the communicator first, so that its peers' waits
// end too).
template <class Poll, class AsyncError, class Fail, class Now>
void wait_for_stream(Poll poll, AsyncError async_error, Fail fail, double timeout_s, Now now_s) {
  const double start = now_s();
  while (poll() == StreamPoll::busy) {
    if (const std::optional<std::string> error = async_error()) {
      fail(*error);
      return;  // not reached: fail throws
    }
    if (timeout_s > 0 && now_s() - start > timeout_s) {
      fail(str("not finished after ", timeout_s, " s (", kCollectiveTimeoutVariable,
               "): a rank has died or stopped without NCCL noticing, or is that far behind"));
      return;  // not reached
    }
    std::this_thread::yield();
  }
}

}  // namespace dflash
