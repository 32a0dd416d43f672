// io/file_write.hpp and io/file_read.hpp: a file is replaced whole or not at all, whatever step of
// the write fails (each failed in turn through the fault point); nothing is written through a link;
// appends are whole records; reads refuse what is not a regular file, and files above their bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "harness/file_fault_injector.hpp"
#include "io/errors.hpp"
#include "io/file_read.hpp"
#include "io/file_write.hpp"
#include "io/mapped_file.hpp"
#include "tests/io/safetensors_test_support.hpp"

namespace dflash {
namespace {

using safetensors::testing::input_error_message;
using safetensors::testing::ScratchDirectory;
using safetensors::testing::write_whole_file;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string runtime_error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a std::runtime_error, nothing was thrown";
  return {};
}

TEST(AtomicWrite, ReplacesTheFileWholeAndLeavesNoTemporary) {
  ScratchDirectory dir;
  write_file_atomically(dir / "a.json", "old\n");
  write_file_atomically(dir / "a.json", "new contents\n");
  EXPECT_EQ(text_of(dir / "a.json"), "new contents\n");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"a.json"});
  struct stat st {};
  ASSERT_EQ(::stat((dir / "a.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

// A link at the final name is replaced by the file, its target left alone.
TEST(AtomicWrite, LinkAtTheFinalNameIsReplacedNotFollowed) {
  ScratchDirectory dir, outside;
  write_whole_file(outside / "victim", "precious\n");
  fs::create_symlink(outside / "victim", dir / "latest");
  write_file_atomically(dir / "latest", "step-00000002\n");
  EXPECT_EQ(text_of(outside / "victim"), "precious\n");
  EXPECT_FALSE(fs::is_symlink(dir / "latest"));
  EXPECT_EQ(text_of(dir / "latest"), "step-00000002\n");
}

// Each operation of a replacement fails in turn, with ENOSPC and with EIO: until the rename, the old
// contents stay and no temporary is left; a failure after it (the directory's flush) leaves the new.
TEST(AtomicWrite, EveryFailedStepLeavesTheOldFileOrTheNewOneWhole) {
  std::int64_t operations = 0;
  {
    ScratchDirectory dir;
    testing::FileFaultInjector count(-1, 0);
    write_file_atomically(dir / "f", "new");
    operations = count.operations_seen();
  }
  ASSERT_EQ(operations, 5);  // create, write, sync, rename, sync of the directory
  for (const int error_number : {ENOSPC, EIO}) {
    for (std::int64_t k = 0; k < operations; ++k) {
      ScratchDirectory dir;
      write_whole_file(dir / "f", "old");
      std::string failed, message;
      {
        testing::FileFaultInjector fault(k, error_number);
        message = runtime_error_message([&] { write_file_atomically(dir / "f", "new"); });
        failed = fault.failed();
      }
      EXPECT_THAT(message, HasSubstr("cannot write " + (dir / "f").string())) << failed;
      EXPECT_THAT(message, HasSubstr(std::strerror(error_number))) << failed;
      const bool renamed = k == operations - 1;
      EXPECT_EQ(text_of(dir / "f"), renamed ? "new" : "old") << failed;
      EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"f"}) << failed;
    }
  }
}

TEST(AppendOnlyFile, AppendsWholeRecordsAndCutsAFailedOneOff) {
  ScratchDirectory dir;
  {
    AppendOnlyFile f(dir / "metrics.jsonl");
    f.append("{\"step\":0}\n");
  }
  AppendOnlyFile f(dir / "metrics.jsonl");
  f.append("{\"step\":1}\n");
  for (const int error_number : {ENOSPC, EIO}) {
    for (std::int64_t k = 0; k < 2; ++k) {  // the write, then the flush to disk
      testing::FileFaultInjector fault(k, error_number);
      EXPECT_THAT(runtime_error_message([&] { f.append("{\"step\":2}\n"); }), HasSubstr(std::strerror(error_number)));
      EXPECT_EQ(text_of(dir / "metrics.jsonl"), "{\"step\":0}\n{\"step\":1}\n") << fault.failed();
    }
  }
  f.append("{\"step\":2}\n");
  EXPECT_EQ(text_of(dir / "metrics.jsonl"), "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
}

TEST(AppendOnlyFile, LinkIsRefusedNamingItAndItsTargetIsUntouched) {
  ScratchDirectory dir, outside;
  write_whole_file(outside / "victim", "precious\n");
  fs::create_symlink(outside / "victim", dir / "metrics.jsonl");
  const std::string message = runtime_error_message([&] { AppendOnlyFile f(dir / "metrics.jsonl"); });
  EXPECT_THAT(message, HasSubstr((dir / "metrics.jsonl").string()));
  EXPECT_THAT(message, HasSubstr("symbolic link"));
  EXPECT_EQ(text_of(outside / "victim"), "precious\n");
}

TEST(RegularFileRead, ReadsUpToItsBoundAndRefusesAByteMore) {
  ScratchDirectory dir;
  write_whole_file(dir / "f", "0123456789");
  EXPECT_EQ(read_regular_file(dir / "f", 10), "0123456789");
  EXPECT_THAT(input_error_message([&] { read_regular_file(dir / "f", 9); }),
              HasSubstr((dir / "f").string() + ": 10 bytes exceeds the 9-byte limit for this file"));
  write_whole_file(dir / "empty", "");
  EXPECT_EQ(read_regular_file(dir / "empty", 0), "");
}

TEST(RegularFileRead, WhatIsNotARegularFileIsRefusedNamingItWithoutBlocking) {
  ScratchDirectory dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);  // no writer: a blocking open would hang
  fs::create_symlink("/dev/zero", dir / "zero");
  fs::create_symlink(dir / "absent", dir / "dangling");
  fs::create_directory(dir / "directory");
  const std::pair<const char*, const char*> cases[] = {{"fifo", "is a FIFO, not a regular file"},
                                                       {"zero", "is a character device, not a regular file"},
                                                       {"dangling", "is a dangling symbolic link"},
                                                       {"directory", "is a directory, not a regular file"},
                                                       {"absent", "cannot be opened: No such file or directory"}};
  for (const auto& [name, problem] : cases) {
    EXPECT_THAT(input_error_message([&] { read_regular_file(dir / name, 1 << 20); }),
                HasSubstr((dir / name).string() + ": " + problem));
    EXPECT_THAT(input_error_message([&] { require_regular_file(dir / name); }), HasSubstr(problem));
  }
}

// Issue 22, class 4: a shard cut after require_unshrunk's check, while its rows were being copied,
// killed the process with SIGBUS. A guarded copy ends as an error naming the file and its sizes.
TEST(MappedFile, FileCutDuringAGuardedCopyIsAnErrorNamingIt) {
  ScratchDirectory dir;
  const fs::path path = dir / "shard.safetensors";
  constexpr std::size_t kBytes = 3 * 4096;
  write_whole_file(path, std::string(kBytes, '\x01'));
  const MappedFile file = MappedFile::open(path);
  ASSERT_NO_THROW(file.require_unshrunk());
  fs::resize_file(path, 0);  // cut after the check: every page of the map now faults
  volatile std::size_t copied = 0;
  const std::string message = input_error_message([&] {
    file.copy_guarded([&] {
      for (std::size_t i = 0; i < file.size(); ++i) copied = copied + std::size_t(file.bytes()[i]);
    });
  });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("shrank from 12288 to 0 bytes"));
  EXPECT_EQ(copied, 0u);  // the first byte already faulted
  // The guard is released with the error: a later guarded copy of the regrown file runs to the end.
  fs::resize_file(path, kBytes);  // the lost bytes read as zeros
  std::size_t sum = 1;
  file.copy_guarded([&] {
    sum = 0;
    for (std::size_t i = 0; i < file.size(); ++i) sum += std::size_t(file.bytes()[i]);
  });
  EXPECT_EQ(sum, 0u);
}

// An error thrown inside a guarded copy passes through unchanged and releases the guard.
TEST(MappedFile, AnErrorInsideAGuardedCopyPassesThrough) {
  ScratchDirectory dir;
  write_whole_file(dir / "shard.safetensors", std::string(4096, '\x02'));
  const MappedFile file = MappedFile::open(dir / "shard.safetensors");
  EXPECT_THAT(input_error_message([&] { file.copy_guarded([] { throw_input_error("row 3", "is bad"); }); }),
              HasSubstr("row 3"));
  std::size_t sum = 0;
  file.copy_guarded([&] {
    for (std::byte b : file.bytes()) sum += std::size_t(b);
  });
  EXPECT_EQ(sum, 2u * 4096);
}

}  // namespace
}  // namespace dflash
