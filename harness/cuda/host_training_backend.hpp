// The CPU's training backend: what distributed/cuda/training_backend.hpp's CudaTrainingBackend
// does on the GPU, done on the host, so that the CUDA training step's orchestration
// (distributed/cuda/train_step_loop.hpp) and its resident state (DeviceTrainingState) run in CI:
//   - buffers are counted by `tracker` (as the device allocator counts the GPU's) and filled with
//     NaN bytes when made (device memory is not initialised);
//   - the optimizer kernels are their programs over the launchers' grids
//     (harness/cuda/host_optimizer_exec.hpp);
//   - the drafter's loop is the device step's own code on the CPU backends (host_drafter_sequences);
//   - the GPU's two streams are emulated (HostStreams), so that a missing wait shows as it would on
//     the GPU, every time rather than now and then: see below;
//   - what a kernel is documented to touch must lie within the buffer it is given
//     (HostStreams::require_extent), where the GPU would overrun it silently.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "distributed/communicator.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "harness/cuda/host_optimizer_exec.hpp"
#include "io/errors.hpp"

namespace dflash {

// The compute stream and the communication stream on the host.
//  - Compute work (copies, zeroing, the optimizer kernels) waits in a queue and runs only when the
//    host waits for it: a read back, synchronize(), the drafter's loop (host code that runs the
//    trunk and loss head in stream order), after_compute() (an event the communication stream
//    waits for), or a buffer's release (frees are stream-ordered, as cudaFreeAsync's). A collective
//    called without synchronize() first sees what the stream has not yet written.
//  - A sum on the communication stream is taken when it is issued, from the values the compute
//    stream has written by then (the earliest a GPU could run it: a bucket issued before its
//    gradients are final misses what comes later), and lands in the buffer only when the compute
//    stream is made to wait for it (compute_waits, the latest a GPU could let it land): a read
//    that does not wait for the sums sees the rank's own values.
class HostStreams {
 public:
  void enqueue(std::function<void()> work) { compute_.push_back(std::move(work)); }
  void run_compute() {
    while (!compute_.empty()) {
      std::vector<std::function<void()>> work = std::move(compute_);
      compute_.clear();
      for (auto& w : work) w();
    }
  }
  // The sum over `device`'s ranks of buffer[0, count), taken now, landing at land_sums().
  void sum_later(Communicator& device, float* buffer, std::size_t count) {
    std::vector<float> sums(buffer, buffer + count);
    device.all_reduce(sums.data(), sums.data(), count, CommType::f32, CommOp::sum);
    landing_.push_back({buffer, std::move(sums)});
  }
  void land_sums() {
    for (Landing& l : landing_) std::memcpy(l.buffer, l.sums.data(), l.sums.size() * sizeof(float));
    landing_.clear();
  }

  // The live buffers by address, so that what a kernel is documented to touch can be held to the
  // buffer it is given, as compute-sanitizer would on the GPU (where an overrun corrupts a
  // neighbour silently): [p, p + bytes) must lie within one live buffer.
  void note_allocation(const void* p, std::size_t bytes) {
    if (p != nullptr) live_[p] = bytes;
  }
  void note_release(const void* p) { live_.erase(p); }
  void require_extent(const void* p, std::size_t bytes, const char* what) const {
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) throw std::logic_error(str(what, ": not in any live buffer"));
    --it;
    const auto offset = std::size_t(static_cast<const char*>(p) - static_cast<const char*>(it->first));
    if (offset > it->second || bytes > it->second - offset) {
      throw std::logic_error(str(what, ": ", bytes, " B at offset ", offset, " of a buffer of ", it->second, " B"));
    }
  }

 private:
  struct Landing {
    float* buffer;
    std::vector<float> sums;
  };
  std::vector<std::function<void()>> compute_;
  std::vector<Landing> landing_;
  std::map<const void*, std::size_t> live_;
};

// A HostBuffer whose writes through zero() and whose release are compute-stream work (the
// DeviceBuffer's are: cudaMemsetAsync, cudaFreeAsync).
template <class T>
class StreamOrderedHostBuffer {
 public:
  StreamOrderedHostBuffer() = default;
  StreamOrderedHostBuffer(MemoryTracker& tracker, MemoryCategory category, std::size_t n,
                          std::shared_ptr<HostStreams> streams)
      : values_(tracker, category, n), streams_(std::move(streams)) {
    streams_->note_allocation(values_.data(), n * sizeof(T));
  }
  StreamOrderedHostBuffer(StreamOrderedHostBuffer&&) noexcept = default;
  StreamOrderedHostBuffer& operator=(StreamOrderedHostBuffer&& other) noexcept {
    if (this != &other) {
      release();
      values_ = std::move(other.values_);
      streams_ = std::move(other.streams_);
    }
    return *this;
  }
  ~StreamOrderedHostBuffer() { release(); }

  T* data() { return values_.data(); }
  const T* data() const { return values_.data(); }
  std::size_t size() const { return values_.size(); }
  void zero() {
    T* p = values_.data();
    const std::size_t n = values_.size();
    streams_->enqueue([p, n] { std::fill(p, p + n, T(0)); });
  }
  void release() noexcept {
    if (streams_) {
      streams_->run_compute();  // nothing queued may outlive the bytes it touches
      streams_->note_release(values_.data());
    }
    values_.release();
  }

 private:
  HostBuffer<T> values_;
  std::shared_ptr<HostStreams> streams_;
};

struct HostTrainingBackend {
  template <class T>
  using Buffer = StreamOrderedHostBuffer<T>;

  MemoryTracker& tracker;
  // Shared by every copy of this backend (the state holds one, the tests another).
  std::shared_ptr<HostStreams> streams = std::make_shared<HostStreams>();

  template <class T>
  Buffer<T> buffer(MemoryCategory category, std::size_t n) const {
    return Buffer<T>(tracker, category, n, streams);
  }
  // An upload is a synchronous copy (copy_to_device waits).
  template <class T>
  Buffer<T> from_host(MemoryCategory category, const std::vector<T>& values) const {
    Buffer<T> b(tracker, category, values.size(), streams);
    streams->run_compute();
    std::copy(values.begin(), values.end(), b.data());
    return b;
  }
  template <class T>
  std::vector<T> to_host(const Buffer<T>& b) const {
    streams->run_compute();
    return std::vector<T>(b.data(), b.data() + b.size());
  }
  void copy(void* to, const void* from, std::size_t bytes) const {
    if (bytes > 0) streams->enqueue([to, from, bytes] { std::memmove(to, from, bytes); });
  }
  void read(void* host, const void* device, std::size_t bytes) const {
    streams->run_compute();
    if (bytes > 0) std::memcpy(host, device, bytes);
  }
  void write(void* device, const void* host, std::size_t bytes) const {
    streams->run_compute();
    if (bytes > 0) std::memcpy(device, host, bytes);
  }
  void zero(void* device, std::size_t bytes) const {
    if (bytes > 0) streams->enqueue([device, bytes] { std::memset(device, 0, bytes); });
  }
  void synchronize() const { streams->run_compute(); }

  // CudaTrainingBackend's contract: g holds n values, partials kNormMaxBlocks.
  void squared_norm(const float* g, std::int64_t n, double* partials, double* out) const {
    if (n > 0) streams->require_extent(g, std::size_t(n) * sizeof(float), "squared_norm's gradient");
    streams->require_extent(partials, std::size_t(kNormMaxBlocks) * sizeof(double), "squared_norm's partials");
    streams->enqueue([=] { squared_norm_on_host(g, n, partials, out); });
  }
  void adamw_step(const AdamWRange& range) const {
    streams->enqueue([range] {
      elementwise_on_host(range.end - range.begin, false, [&](std::int64_t i) { adamw_step_at(i, range); });
    });
  }
  void bf16_copy(const float* master, std::int64_t n, Bf16Bits* working) const {
    streams->enqueue([=] { elementwise_on_host(n, false, [&](std::int64_t i) { bf16_copy_at(i, master, working); }); });
  }

  LossHeadStats<double> drafter_sequences(MemoryTracker& host, const DrafterConfig& config,
                                          const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                          const DrafterStepOptions& options, const LossHeadOptions& loss_options,
                                          const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                          std::vector<std::vector<std::uint8_t>>* hits,
                                          const Bf16Features* bf16 = nullptr) const {
    streams->run_compute();
    return host_drafter_sequences(tracker, host, config, weights, batch, options, loss_options, seqs, weight_sum, true,
                                  hits, bf16);
  }
  LossHeadStats<double> drafter_forward_sequences(MemoryTracker& host, const DrafterConfig& config,
                                                  const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                                  const DrafterStepOptions& options,
                                                  const LossHeadOptions& loss_options,
                                                  const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                                  std::vector<std::vector<std::uint8_t>>* hits,
                                                  const Bf16Features* bf16 = nullptr) const {
    streams->run_compute();
    return host_drafter_sequences(tracker, host, config, weights, batch, options, loss_options, seqs, weight_sum, false,
                                  hits, bf16);
  }

  const MemoryTracker& counts() const { return tracker; }
  void reset_peaks() const { tracker.reset_peaks(); }

  // HostStreams' communication stream, as CudaTrainingBackend::CommunicationStream's.
  class CommunicationStream {
   public:
    explicit CommunicationStream(const HostTrainingBackend& backend) : streams_(backend.streams) {}
    ~CommunicationStream() {  // the GPU's sums land in the end, waited for or not
      streams_->run_compute();
      streams_->land_sums();
    }
    CommunicationStream(const CommunicationStream&) = delete;
    CommunicationStream& operator=(const CommunicationStream&) = delete;
    void after_compute() { streams_->run_compute(); }
    void all_reduce_sum(Communicator& device, float* buffer, std::size_t count) {
      streams_->sum_later(device, buffer, count);
    }
    void compute_waits(Communicator& device) {
      streams_->run_compute();          // what was given to the compute stream before it waits runs first
      device.wait_for_stream(nullptr);  // as the GPU's: the sums are the stream's
      streams_->land_sums();
    }

   private:
    std::shared_ptr<HostStreams> streams_;
  };
};

}  // namespace dflash
