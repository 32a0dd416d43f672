// `dflash verify` as a user runs it: a skipped row is not a pass where a GPU is required
// (DFLASH_REQUIRE_GPU=1), and the CUDA rows' skips do not fail a plain run whose other rows pass.
// CUDA_VISIBLE_DEVICES=-1 hides every GPU, so the CUDA rows skip on any machine (and a build
// without CUDA reports its one cuda row SKIPPED the same way).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "golden/file.hpp"
#include "tests/io/safetensors_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace dflash {
namespace {

using testing_support::CliRun;
using testing_support::run_dflash;

class VerifyCli : public ::testing::Test {
 protected:
  void SetUp() override { setenv("CUDA_VISIBLE_DEVICES", "-1", 1); }

  static CliRun verify(const std::string& args, bool require_gpu) {
    if (require_gpu) {
      setenv("DFLASH_REQUIRE_GPU", "1", 1);
    } else {
      unsetenv("DFLASH_REQUIRE_GPU");
    }
    return run_dflash("verify " + args);
  }
};

TEST_F(VerifyCli, SkippedCudaRowsFailWhenAGpuIsRequired) {
  const CliRun r = verify("--device cuda --group golden,cuda", true);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("SKIPPED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 FAIL"), std::string::npos) << r.out;  // no row failed: the skips alone fail it
  EXPECT_NE(r.err.find("DFLASH_REQUIRE_GPU=1, but"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SKIPPED ("), std::string::npos) << r.err;  // with the reason
}

TEST_F(VerifyCli, SkippedCudaRowsDoNotFailOtherwise) {
  const CliRun r = verify("--device cuda --group golden,cuda", false);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SKIPPED"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the exit code reflects the other rows only"), std::string::npos) << r.err;
}

TEST_F(VerifyCli, RequiringAGpuDoesNotFailRowsThatRan) {
  const CliRun r = verify("--group golden", true);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("SKIPPED  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 FAIL, 0 SKIPPED"), std::string::npos) << r.out;
}

// One failing row is enough to fail the run (exit 1): a golden directory (DFLASH_GOLDEN_DIR) holding
// the committed goldens, one of them with its loss multiplied by 1.5.
TEST_F(VerifyCli, ASingleFailingRowFailsTheRun) {
  const std::filesystem::path committed = std::filesystem::path(DFLASH_SOURCE_DIR) / "golden" / "data";
  const safetensors::testing::ScratchDirectory scratch;
  const std::filesystem::path& dir = scratch.path();
  for (const auto& entry : std::filesystem::directory_iterator(committed)) {
    if (entry.path().extension() == ".safetensors") {
      std::filesystem::copy_file(entry.path(), dir / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  std::filesystem::remove(dir / "short-context.safetensors");
  Golden damaged = read_golden(committed / "short-context.safetensors");
  damaged.results.at("output/loss").values.at(0) *= 1.5;
  write_golden(damaged, dir / "short-context.safetensors");
  struct GoldenDirectoryForThisTest {
    explicit GoldenDirectoryForThisTest(const std::filesystem::path& d) { setenv("DFLASH_GOLDEN_DIR", d.c_str(), 1); }
    ~GoldenDirectoryForThisTest() { unsetenv("DFLASH_GOLDEN_DIR"); }
  } golden_dir(dir);
  const CliRun r = verify("--group golden", false);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find(" 1 FAIL, 0 SKIPPED"), std::string::npos) << r.out;
}

TEST_F(VerifyCli, UnknownGroupIsAnError) {
  const CliRun r = verify("--group golden,trunks", false);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("no rows for group 'trunks'"), std::string::npos) << r.err;
}

TEST_F(VerifyCli, CudaGroupNeedsTheCudaDevice) {
  const CliRun r = verify("--group cuda", false);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("need --device cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace dflash
