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
  // The CUDA training step's layout (distributed/cuda_train_step.hpp): one flat gradient of the
  // padded size, reduced in place (no bucket buffers), master weights and moments of the shard
  // clipped to P (the padding never stored).
  bool in_place_flat = false;
};

// ZeRO-1 pads the flat parameter vector with zeros to a multiple of G x 128 elements so that every
// GPU owns a contiguous shard of the same size (TRAINING §13).
inline constexpr std::int64_t kZeroShardAlignment = 128;

// Throws InputError naming the field ("gpus", "zero", ...).
void validate_parallel_layout(const ParallelLayout& layout);

// The flat vector's length as laid out: ZeRO-1 rounds `count` up to a multiple of G x 128, ZeRO-0
// keeps it.
std::int64_t padded_count(std::int64_t count, const ParallelLayout& layout);

// Elements of a replicated-or-sharded state of `count` elements one GPU holds: all of them
// unless sharded (ZeRO-1 over G GPUs: padded_count / G, the shard; in_place_flat: the shard
// clipped to count, rank 0's).
std::int64_t elements_per_gpu(std::int64_t count, const ParallelLayout& layout, bool sharded_by_zero1);

// Elements of one gradient bucket for a flat vector of `count` elements of `element_bytes`:
// ZeRO-0 reduces contiguous pieces of min(count, bucket_bytes / element_bytes) elements; ZeRO-1
// reduce-scatters G pieces of c = min(shard, max(1, bucket_bytes / (element_bytes G))) elements
// at once, piece r taken from shard r, so a bucket holds G c elements.
std::int64_t bucket_elements(std::int64_t count, const ParallelLayout& layout, std::int64_t element_bytes);

// buckets_in_flight buckets when gpus > 1 (one GPU reduces nothing); none when in_place_flat.
std::int64_t communication_bytes(const ParallelLayout& layout, std::int64_t count, std::int64_t element_bytes);

}  // namespace dflash
