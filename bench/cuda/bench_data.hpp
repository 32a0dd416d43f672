// The benchmark's inputs, generated on the device from a seed (Philox, common/philox.hpp) so that
// the CUDA benchmark and the PyTorch baseline (which loads libdflash_bench_data.so through
// ctypes) run on bit-identical data without moving gigabytes through files.
//
// Loss head (bench_cuda_loss_head, loss_head_torch.py):
//
//   Y, G   [T,H] bf16, uniform in (-1, 1) (G scaled by teacher_scale)
//   W_lm   [V,H] bf16, uniform in (-a, a), a = logit_scale sqrt(3 / H): logits of size ~logit_scale
//   rows   DFlash blocks of 32: position k = i mod 32; k = 0 carries no label (valid 0, weight 0);
//          otherwise label = Philox word mod V and weight exp(-(k - 1) / 7)
//
// Drafter step (bench_cuda_drafter_step, drafter_step_torch.py), a synthetic sequence of S tokens:
//   tokens x[p] = Philox word p mod V; loss mask m[p] = [p >= S/4] (a prompt, then the answer)
//   anchors     SPEC §4's sample (the config's seed, step 0, sequence 0); block rows by
//               reference/anchors.hpp's sequence_blocks (tokens, positions, labels, weights, w01,
//               teacher rows)
//   parameters  matrix i (its index in drafter_parameter_shapes order, norm weights counted)
//               uniform in +-sqrt(3 / fan_in) (unit-variance outputs); norm weights 1 (SPEC §3)
//   E           uniform in (-1, 1); W_lm uniform in +-logit_scale sqrt(3 / H)
//   F [S, K H]  uniform in (-1, 1); the gathered teacher rows [T, H]: row i is G[teacher_row(i)]
//               of a G [S, H] uniform in (-1, 1) (0 where teacher_row = -1), generated in place
#pragma once

#include <cstdint>

extern "C" {

// Device pointers; labels int64, weights fp32, valid uint8. Returns a cudaError_t (0 = success)
// after the device has finished.
int dflash_bench_fill_loss_head_inputs(void* hidden, void* teacher_hidden, void* lm_head, void* labels, void* weights,
                                       void* valid, long long rows, long long hidden_size, long long vocab,
                                       unsigned long long seed, float logit_scale, float teacher_scale);

// The drafter step's trainable matrix number `index` [rows, cols] (bf16; fan_in = cols).
int dflash_bench_fill_drafter_matrix(void* w, long long rows, long long cols, unsigned long long seed,
                                     unsigned int index);

// E and W_lm [vocab, hidden] (bf16).
int dflash_bench_fill_frozen(void* embed, void* lm_head, long long vocab, long long hidden, unsigned long long seed,
                             float logit_scale);

// F [context, feature_width] and the teacher rows [rows, hidden] (bf16) gathered by
// teacher_row_index (device int64 [rows], -1: a row of zeros).
int dflash_bench_fill_drafter_inputs(void* features, long long context, long long feature_width, void* teacher_rows,
                                     const void* teacher_row_index, long long rows, long long hidden,
                                     unsigned long long seed);

// Host: the synthetic sequence's anchor slots (anchors, keep [max_anchors]) and block rows
// (input_tokens, positions, labels, teacher_rows, weights, valid [max_anchors block_size]; labels
// and teacher_rows -1 where w01 = 0). decay_gamma <= 0: none (the config's null). Returns 0, or 1
// with the reason in error (error_size bytes, NUL-terminated).
int dflash_bench_drafter_sequence(long long context, long long vocab, long long block_size, long long mask_token_id,
                                  long long max_anchors, double decay_gamma, unsigned long long data_seed,
                                  unsigned long long anchor_seed, std::int64_t* anchors, std::uint8_t* keep,
                                  std::int64_t* input_tokens, std::int64_t* positions, std::int64_t* labels,
                                  std::int64_t* teacher_rows, float* weights, std::uint8_t* valid, char* error,
                                  long long error_size);

// n bf16 values uniform in (-amplitude, amplitude) from Philox stream `stream` (matrix-rate runs).
int dflash_bench_fill_uniform_bf16(void* x, long long n, unsigned long long seed, unsigned int stream, float amplitude);
}
