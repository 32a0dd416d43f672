#include "bench/cuda/bench_verdict.hpp"

#include <exception>
#include <iostream>

namespace dflash {

int report_verdicts(const std::vector<std::string>& missed, const std::vector<std::string>& wrong) {
  std::cout << "\nperformance targets: " << (missed.empty() ? "met" : "MISSED");
  for (const std::string& m : missed) std::cout << "; " << m;
  std::cout << "\n";
  for (const std::string& w : wrong) std::cout << "wrong: " << w << "\n";
  std::cout << "correctness: " << (wrong.empty() ? "PASS" : "FAIL") << "\n";
  if (!wrong.empty()) return 1;
  return missed.empty() ? 0 : 3;
}

int run_benchmark(const char* name, int (*bench_main)(int, char**), int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace dflash
