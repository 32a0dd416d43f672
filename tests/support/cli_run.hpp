// Runs the built `dflash` program as a user would and captures what it says. The test target
// defines DFLASH_BIN_DEFAULT (the binary's path, `$<TARGET_FILE:dflash>`); DFLASH_BIN overrides it.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dflash::testing_support {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// `dflash <args>` (args are passed to the shell as written), run in `working_dir` if given.
inline CliRun run_dflash(const std::string& args, const std::filesystem::path& working_dir = {}) {
  static std::atomic<int> counter{0};
  const char* env = std::getenv("DFLASH_BIN");
  const std::string bin = env != nullptr ? env : DFLASH_BIN_DEFAULT;
  const std::string stem = "dflash_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const auto out = std::filesystem::temp_directory_path() / (stem + ".out");
  const auto err = std::filesystem::temp_directory_path() / (stem + ".err");
  const std::string cd = working_dir.empty() ? "" : "cd '" + working_dir.string() + "' && ";
  const std::string command = cd + "'" + bin + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  CliRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text_file(out), read_text_file(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace dflash::testing_support
