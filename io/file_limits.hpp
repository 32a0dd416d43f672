// The largest file each reader of the run's own files takes in, in bytes. A reader checks the size
// before it reads (io/file_read.hpp), so a link to /dev/zero or a file grown by mistake is refused
// by name instead of filling memory. Each bound is far above any real file of its kind and far
// below what would hurt a machine that trains.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dflash {

// A drafter or training config, a target's config.json: real ones are 1-10 kB (a Hugging Face
// config with its tokenizer fields inlined stays under 100 kB).
inline constexpr std::uint64_t kMaxConfigFileBytes = std::uint64_t(16) << 20;

// The deepest nesting of a config's JSON (trainer_state.json records one as a value): configs
// nest two levels (layer_types, target_layer_ids), so 8 refuses only a hostile file.
inline constexpr std::size_t kMaxConfigJsonDepth = 8;

// trainer_state.json: the config it records plus ~1 kB of counters and hashes.
inline constexpr std::uint64_t kMaxTrainerStateFileBytes = std::uint64_t(16) << 20;

// `latest`: "step-<8 digits>\n" is 14 bytes; 64 leaves room for a CRLF and nothing else.
inline constexpr std::uint64_t kMaxLatestFileBytes = 64;

// metrics.jsonl and eval.jsonl: ~1 kB a step (the per-position accuracies of a block of 16), so
// 4 GiB holds 4 million steps, ~40x the longest run TRAINING plans for.
inline constexpr std::uint64_t kMaxMetricsFileBytes = std::uint64_t(4) << 30;

// A Hugging Face model.safetensors.index.json lists tensor names only: even a 100k-tensor model is
// a few MB.
inline constexpr std::uint64_t kMaxIndexFileBytes = 100'000'000;

}  // namespace dflash
