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
Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("sha256: init failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, std::size_t n) {
  if (EVP_DigestUpdate(ctx_, data, n) != 1) throw std::runtime_error("sha256: update failed");
}

std::string Sha256::hex() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_, md.data(), &n) != 1) throw std::runtime_error("sha256: final failed");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kDigits[md[i] >> 4];
    out += kDigits[md[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 d;
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  // A regular file only: a link to /dev/zero or a FIFO would never end (or never start).
  const RegularFile file = RegularFile::open(path);
  Sha256 d;
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
