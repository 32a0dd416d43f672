// SHA-256 of a file (OpenSSL's EVP digest), as lowercase hex: the hash a checkpoint records for
// each of its files and verifies on load (TRAINING §15).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace dflash {

std::string sha256_hex(std::string_view bytes);
// Streams the file; throws dflash::InputError naming it when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace dflash
