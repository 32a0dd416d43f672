// Waiting for a stream that runs NCCL collectives without waiting forever for a failed one. When a
// peer dies or the network fails mid-collective, NCCL reports it as the communicator's
// asynchronous error (ncclCommGetAsyncError) while the collective's kernel never finishes, so
// cudaStreamSynchronize would block for good and the job would hang instead of failing. The wait
// polls the stream and, while it is busy, the communicator's error. Pure logic over two callables,
// so the CPU tests drive it with fakes (tests/distributed/cuda/test_stream_wait.cpp); the NCCL
// communicator (nccl_communicator.cpp) passes cudaStreamQuery and ncclCommGetAsyncError.
#pragma once

#include <optional>
#include <string>
#include <thread>

namespace dflash {

enum class StreamPoll { done, busy };

// Returns once `poll()` says done. `poll()` throws on an error of the stream itself. While busy,
// `async_error()` is asked after every poll; the first error it gives is handed to `fail(error)`,
// which must throw (it aborts the communicator first, so that its peers' waits end too).
template <class Poll, class AsyncError, class Fail>
void wait_for_stream(Poll poll, AsyncError async_error, Fail fail) {
  while (poll() == StreamPoll::busy) {
    if (const std::optional<std::string> error = async_error()) {
      fail(*error);
      return;  // not reached: fail throws
    }
    std::this_thread::yield();
  }
}

}  // namespace dflash
