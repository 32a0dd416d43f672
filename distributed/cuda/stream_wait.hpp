// Waiting for a stream that runs NCCL collectives without waiting forever for a failed one. When a
// peer dies or the network fails mid-collective, NCCL reports it as the communicator's
// asynchronous error (ncclCommGetAsyncError) while the collective's kernel never finishes, so
// cudaStreamSynchronize would block for good and the job would hang instead of failing. The wait
// (distributed/collective_wait.hpp) polls the stream and, while it is busy, the communicator's
// error. Ranks on one node exchange through shared memory and peer-to-peer copies, where a dead
// process breaks no connection: NCCL may never report it, nor a rank that stopped (stuck in I/O, a
// debugger). So the wait also has a limit: a stream still busy after it fails as well. The NCCL
// communicator (nccl_communicator.cpp) passes cudaStreamQuery, ncclCommGetAsyncError and a steady
// clock; the CPU tests pass fakes (tests/distributed/cuda/test_stream_wait.cpp).
#pragma once

#include "distributed/collective_wait.hpp"

namespace dflash {

using StreamPoll = CollectivePoll;

// The environment variable that sets the limit, in seconds (0: none).
inline constexpr const char* kNcclTimeoutVariable = "DFLASH_NCCL_TIMEOUT_S";
// Its default: 30 minutes. A wait spans one collective and, for the gradient buckets, the backward
// they follow: seconds at full scale, the ranks brought together each step by an MPI all-reduce.
// The lead's long host work - writing a checkpoint (20.8 GB at full scale), a resume's hash
// check - happens while its peers wait in MPI (whose own limit, DFLASH_MPI_TIMEOUT_S, is longer),
// not here (dflash train puts a barrier before each checkpoint part's gather). Far above any
// healthy wait, far below a hung job's lost hours.
inline constexpr double kDefaultNcclTimeoutS = 1800.0;

// The limit `value` (the variable's value; null or empty: the default) sets: a finite number of
// seconds >= 0. Throws InputError naming the variable otherwise.
inline double nccl_timeout_seconds(const char* value) {
  return wait_limit_seconds(kNcclTimeoutVariable, value, kDefaultNcclTimeoutS);
}

// Returns once `poll()` says done (wait_for_collective, with the NCCL limit of timeout_s seconds):
// `poll()` throws on an error of the stream itself; the first error `async_error()` gives while the
// stream is busy, or the limit passed, goes to `fail(reason)`, which must throw (it aborts the
// communicator first, so that its peers' waits end too).
template <class Poll, class AsyncError, class Fail, class Now>
void wait_for_stream(Poll poll, AsyncError async_error, Fail fail, double timeout_s, Now now_s) {
  wait_for_collective(poll, async_error, fail,
                      WaitLimit{kNcclTimeoutVariable, timeout_s,
                                "a rank has died or stopped without NCCL noticing, or is that far behind"},
                      now_s);
}

}  // namespace dflash
