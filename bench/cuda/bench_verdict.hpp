// How the CUDA benchmarks end (bench_cuda_loss_head, bench_cuda_drafter_step): the targets line,
// the correctness line last, and exit codes that keep "slow" and "wrong" apart.
#pragma once

#include <string>
#include <vector>

namespace dflash {

// Prints "performance targets: met|MISSED; ...", a "wrong: ..." line per failure and, last,
// "correctness: PASS|FAIL"; returns the exit code: 1 a correctness failure, 3 only a target
// missed, 0 neither.
int report_verdicts(const std::vector<std::string>& missed, const std::vector<std::string>& wrong);

// Runs a benchmark's main; an exception is printed as "<name>: error: <what>" and exits 2.
int run_benchmark(const char* name, int (*bench_main)(int, char**), int argc, char** argv);

}  // namespace dflash
