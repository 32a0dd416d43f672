#include "bench/cuda/bench_data.hpp"

#include <cmath>

#include <cuda_runtime_api.h>

#include "common/bf16.hpp"
#include "common/dropout_rng.hpp"

namespace dflash {
namespace {

constexpr std::uint32_t kBlockSize = 32;

// One Philox stream per tensor; element e takes word e of its stream. The drafter step's
// parameters take parameter_stream + their index.
enum BenchStream : std::uint32_t {
  hidden_stream = 1,
  teacher_stream = 2,
  head_stream = 3,
  label_stream = 4,
  embed_stream = 5,
  features_stream = 6,
  parameter_stream = 1024,
};

__device__ inline float uniform_symmetric(std::uint64_t seed, std::uint32_t stream, std::uint64_t e) {
  const std::uint32_t word = rng_word(seed, stream, 0, e);
  return static_cast<float>((static_cast<double>(word) + 0.5) * (2.0 / 4294967296.0) - 1.0);
}

__global__ void fill_uniform_bf16_kernel(std::uint16_t* x, std::int64_t n, std::uint64_t seed, std::uint32_t stream,
                                         float amplitude) {
  for (std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; e < n;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    x[e] = bf16_bits_from_float(amplitude * uniform_symmetric(seed, stream, static_cast<std::uint64_t>(e)));
  }
}

// Row r of a virtual [*, width] tensor whose element (p, c) is word p width + c of its stream,
// taken at row index[r] (a row of zeros where index[r] < 0): a gather without the source.
__global__ void fill_gathered_rows_kernel(std::uint16_t* x, const std::int64_t* index, std::int64_t rows,
                                          std::int64_t width, std::uint64_t seed, std::uint32_t stream,
                                          float amplitude) {
  for (std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; e < rows * width;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t p = index[e / width];
    x[e] = p < 0 ? 0
                 : bf16_bits_from_float(
                       amplitude * uniform_symmetric(seed, stream, static_cast<std::uint64_t>(p * width + e % width)));
  }
}

__global__ void fill_rows_kernel(std::int64_t* labels, float* weights, std::uint8_t* valid, std::int64_t T,
                                 std::int64_t V, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < T;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint32_t k = static_cast<std::uint32_t>(i % kBlockSize);
    valid[i] = k != 0 ? 1 : 0;
    labels[i] = static_cast<std::int64_t>(rng_word(seed, label_stream, 0, static_cast<std::uint64_t>(i)) % V);
    weights[i] = k != 0 ? expf(-static_cast<float>(k - 1) / 7.0f) : 0.0f;
  }
}

unsigned int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return static_cast<unsigned int>(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

void fill_uniform(void* x, std::int64_t n, std::uint64_t seed, std::uint32_t stream, float amplitude) {
  fill_uniform_bf16_kernel<<<blocks_for(n), 256>>>(static_cast<std::uint16_t*>(x), n, seed, stream, amplitude);
}

// The launches' status, then the device's once it has finished.
int finished() {
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return static_cast<int>(launched);
  return static_cast<int>(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace dflash

extern "C" int dflash_bench_fill_loss_head_inputs(void* hidden, void* teacher_hidden, void* lm_head, void* labels,
                                                  void* weights, void* valid, long long rows, long long hidden_size,
                                                  long long vocab, unsigned long long seed, float logit_scale,
                                                  float teacher_scale) {
  using namespace dflash;
  const std::int64_t TH = rows * hidden_size, VH = vocab * hidden_size;
  const float head_amplitude = logit_scale * std::sqrt(3.0f / static_cast<float>(hidden_size));
  fill_uniform(hidden, TH, seed, hidden_stream, 1.0f);
  fill_uniform(teacher_hidden, TH, seed, teacher_stream, teacher_scale);
  fill_uniform(lm_head, VH, seed, head_stream, head_amplitude);
  fill_rows_kernel<<<blocks_for(rows), 256>>>(static_cast<std::int64_t*>(labels), static_cast<float*>(weights),
                                              static_cast<std::uint8_t*>(valid), rows, vocab, seed);
  return finished();
}

extern "C" int dflash_bench_fill_uniform_bf16(void* x, long long n, unsigned long long seed, unsigned int stream,
                                              float amplitude) {
  using namespace dflash;
  fill_uniform(x, n, seed, stream, amplitude);
  return finished();
}

extern "C" int dflash_bench_fill_drafter_matrix(void* w, long long rows, long long cols, unsigned long long seed,
                                                unsigned int index) {
  using namespace dflash;
  fill_uniform(w, rows * cols, seed, parameter_stream + index, std::sqrt(3.0f / static_cast<float>(cols)));
  return finished();
}

extern "C" int dflash_bench_fill_frozen(void* embed, void* lm_head, long long vocab, long long hidden,
                                        unsigned long long seed, float logit_scale) {
  using namespace dflash;
  fill_uniform(embed, vocab * hidden, seed, embed_stream, 1.0f);
  fill_uniform(lm_head, vocab * hidden, seed, head_stream, logit_scale * std::sqrt(3.0f / static_cast<float>(hidden)));
  return finished();
}

extern "C" int dflash_bench_fill_drafter_inputs(void* features, long long context, long long feature_width,
                                                void* teacher_rows, const void* teacher_row_index, long long rows,
                                                long long hidden, unsigned long long seed) {
  using namespace dflash;
  fill_uniform(features, context * feature_width, seed, features_stream, 1.0f);
  fill_gathered_rows_kernel<<<blocks_for(rows * hidden), 256>>>(static_cast<std::uint16_t*>(teacher_rows),
                                                                static_cast<const std::int64_t*>(teacher_row_index),
                                                                rows, hidden, seed, teacher_stream, 1.0f);
  return finished();
}
