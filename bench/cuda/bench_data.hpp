// The benchmark's inputs, generated on the device from a seed (Philox, common/philox.hpp) so that
// the CUDA benchmark and the PyTorch baseline (which loads libdflash_bench_data.so through
// ctypes) run on bit-identical data without moving gigabytes through files.
//
//   Y, G   [T,H] bf16, uniform in (-1, 1) (G scaled by teacher_scale)
//   W_lm   [V,H] bf16, uniform in (-a, a), a = logit_scale sqrt(3 / H): logits of size ~logit_scale
//   rows   DFlash blocks of 32: position k = i mod 32; k = 0 carries no label (valid 0, weight 0);
//          otherwise label = Philox word mod V and weight exp(-(k - 1) / 7)
#pragma once

#include <cstdint>

extern "C" {

// Device pointers; labels int64, weights fp32, valid uint8. Returns a cudaError_t (0 = success)
// after the device has finished.
int dflash_bench_fill_loss_head_inputs(void* hidden, void* teacher_hidden, void* lm_head, void* labels, void* weights,
                                       void* valid, long long rows, long long hidden_size, long long vocab,
                                       unsigned long long seed, float logit_scale, float teacher_scale);

// n bf16 values uniform in (-amplitude, amplitude) from Philox stream `stream` (matrix-rate runs).
int dflash_bench_fill_uniform_bf16(void* x, long long n, unsigned long long seed, unsigned int stream, float amplitude);
}
