// SHA-256 of a file (OpenSSL's EVP digest), as lowercase hex: the hash a checkpoint records for
// each of its files and verifies on load (TRAINING §15).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace dflash {

// An incremental SHA-256: bytes fed as they are written, so that a writer knows its file's hash
// without reading the file back.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t n);
  std::string hex();  // of everything fed so far; call once

 private:
  evp_md_ctx_st* ctx_;
};

std::string sha256_hex(std::string_view bytes);
// Streams the file; throws dflash::InputError naming it when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace dflash
