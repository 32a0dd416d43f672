// SHA-256 against FIPS 180-2's known answers.
#include <gtest/gtest.h>

#include "io/sha256.hpp"
#include "tests/distributed/train_test_support.hpp"

namespace dflash {
namespace {

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FileHashEqualsBytesHash) {
  train_testing::ScratchDirectory dir;
  const std::string text(200000, 'a');  // several read blocks
  train_testing::write_whole_file(dir / "f", text);
  EXPECT_EQ(sha256_file_hex(dir / "f"), sha256_hex(text));
  EXPECT_THROW(sha256_file_hex(dir / "missing"), InputError);
}

}  // namespace
}  // namespace dflash
