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

#include <algorithm>
#include <cstdint>

namespace dflash {

inline constexpr std::int64_t kDefaultBucketBytes = std::int64_t(25) << 20;

struct ParallelLayout {
  std::int64_t gpus = 8;
  int zero_stage = 1;  // 0 or 1
  std::int64_t bucket_bytes = kDefaultBucketBytes;
  std::int64_t buckets_in_flight = 2;
  // The CUDA training step's layout (distributed/cuda/train_step.hpp): one flat gradient of the
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
// unless sharded (ZeRO-1 over G GPUs: padded_count / G, the shard).
std::int64_t elements_per_gpu(std::int64_t count, const ParallelLayout& layout, bool sharded_by_zero1);

// Elements of one gradient bucket for a flat vector of `count` elements of `element_bytes`:
// ZeRO-0 reduces contiguous pieces of min(count, bucket_bytes / element_bytes) elements; ZeRO-1
// reduce-scatters G pieces of c = min(shard, max(1, bucket_bytes / (element_bytes G))) elements
// at once, piece r taken from shard r, so a bucket holds G c elements.
std::int64_t bucket_elements(std::int64_t count, const ParallelLayout& layout, std::int64_t element_bytes);

// The buckets of a step's gradient reduction over a flat vector of `count` elements (one home for
// their geometry: distributed/train_step.cpp reduces in them, communication_time.hpp times them).
// Bucket k holds the piece [k piece, k piece + elements(k)) of the vector (ZeRO-0), or that piece of
// every shard (ZeRO-1: G pieces, piece r from shard r, one reduce-scatter). Backward finishes the
// flat vector from its end (norm, layers L-1 ... 0, then hidden_norm and fc), and bucket k's
// earliest element is flat element k piece (in shard 0 under ZeRO-1), so the buckets are issued
// k = count() - 1 down to 0, each once backward has finished that element. Under ZeRO-1 every
// bucket thus waits for shard 0, the front of the vector (fc and the first layer): only the part of
// the backward after shard 0's last layer can hide the reduce-scatter.
struct GradientBuckets {
  std::int64_t piece = 1;   // elements of one piece: the bucket (ZeRO-0), or its part of each shard (ZeRO-1)
  std::int64_t extent = 0;  // what the pieces tile: the vector (ZeRO-0) or one shard (ZeRO-1)
  std::int64_t count() const { return (extent + piece - 1) / piece; }
  std::int64_t first(std::int64_t k) const { return k * piece; }  // in the vector, or in each shard
  std::int64_t elements(std::int64_t k) const { return std::min(piece, extent - first(k)); }
};
GradientBuckets gradient_buckets(std::int64_t count, const ParallelLayout& layout, std::int64_t element_bytes);

// buckets_in_flight buckets when gpus > 1 (one GPU reduces nothing); none when in_place_flat.
std::int64_t communication_bytes(const ParallelLayout& layout, std::int64_t count, std::int64_t element_bytes);

}  // namespace dflash
