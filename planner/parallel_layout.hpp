// How a step is spread over GPUs: data parallel over `gpus`, ZeRO stage 0 (every GPU holds
// everything) or 1 (optimizer state and master weights sharded over the GPUs; parameters and
// gradients stay whole), and the gradient communication buffers.
//
// Communication buffers: gradients are reduced in buckets of 25 MiB (PyTorch DDP's default
// bucket_cap_mb), two in flight (one being reduced while the next fills), in the gradient dtype:
// 50 MiB per GPU when gpus > 1, nothing on one GPU. ZeRO-1's reduce-scatter uses the same buckets,
// and its all-gather of updated weights writes into the parameter buffer in place. NCCL's own
// channel buffers and the CUDA context are not planned: the headroom covers them (device_fit.hpp).
#pragma once

#include <cstdint>

namespace dflash {

inline constexpr std::int64_t kDefaultBucketBytes = std::int64_t(25) << 20;

struct ParallelLayout {
  std::int64_t gpus = 8;
  int zero_stage = 1;  // 0 or 1
  std::int64_t bucket_bytes = kDefaultBucketBytes;
  std::int64_t buckets_in_flight = 2;
};

// Throws InputError naming the field ("gpus", "zero", ...).
void validate_parallel_layout(const ParallelLayout& layout);

// Elements of a replicated-or-sharded state of `count` elements one GPU holds: all of them
// unless sharded (ZeRO-1 over G GPUs: ceil(count / G)).
std::int64_t elements_per_gpu(std::int64_t count, const ParallelLayout& layout, bool sharded_by_zero1);

std::int64_t communication_bytes(const ParallelLayout& layout);

}  // namespace dflash
