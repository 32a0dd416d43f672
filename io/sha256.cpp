#include "io/sha256.hpp"

#include <openssl/evp.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "io/errors.hpp"
#include "io/file_read.hpp"

namespace dflash {
namespace {

class Digest {
 public:
  Digest() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("sha256: init failed");
  }
  void update(const char* data, std::size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), data, n) != 1) throw std::runtime_error("sha256: update failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md.data(), &n) != 1) throw std::runtime_error("sha256: final failed");
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out += kDigits[md[i] >> 4];
      out += kDigits[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Digest d;
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  // A regular file only: a link to /dev/zero or a FIFO would never end (or never start).
  const RegularFile file = RegularFile::open(path);
  Digest d;
  std::vector<char> buffer(std::size_t(1) << 16);
  for (;;) {
    const ssize_t n = ::read(file.fd(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_input_error(path.string(), str("cannot be read: ", std::strerror(errno)));
    if (n == 0) break;
    d.update(buffer.data(), std::size_t(n));
  }
  return d.hex();
}

}  // namespace dflash
