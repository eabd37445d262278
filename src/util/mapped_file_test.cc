// MappedFile: which paths map (regular files within the bounds) and which
// are left to the caller's read (missing, small, large, FIFO, directory);
// the mapping's bytes; pages given back read the file again; a file
// truncated under its mapping exits with ExitOnBusError's message.

#include "util/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>

#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i * 7 % 26);
  return s;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(MappedFileTest, MapsRegularFilesWithinTheBoundsOnly) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f";
  const std::string bytes = Pattern(100000);
  Write(path, bytes);
  MappedFile m = MappedFile::Open(path, 4096, 100000);
  ASSERT_TRUE(m.mapped());
  EXPECT_EQ(m.view(), bytes);
  // Moves hand the mapping over.
  MappedFile moved = std::move(m);
  EXPECT_FALSE(m.mapped());  // NOLINT: checking the moved-from state
  EXPECT_EQ(moved.view(), bytes);
  m = std::move(moved);
  EXPECT_EQ(m.view(), bytes);
  EXPECT_FALSE(MappedFile::Open(path, 100001, UINT64_MAX).mapped());
  EXPECT_FALSE(MappedFile::Open(path, 0, 99999).mapped());
  EXPECT_FALSE(MappedFile::Open(dir.path() + "/missing", 0, 1).mapped());
  EXPECT_FALSE(MappedFile::Open(dir.path(), 0, UINT64_MAX).mapped());
  Write(dir.path() + "/empty", "");
  EXPECT_FALSE(MappedFile::Open(dir.path() + "/empty", 0, 10).mapped());
  // A FIFO without a writer: not mapped, and not waited for.
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(MappedFile::Open(fifo, 0, UINT64_MAX).mapped());
}

TEST(MappedFileTest, PagesGivenBackReadTheFileAgain) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f";
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const std::string bytes = Pattern(8 * page + 123);
  Write(path, bytes);
  MappedFile m = MappedFile::Open(path, 0, UINT64_MAX);
  ASSERT_TRUE(m.mapped());
  ASSERT_EQ(m.view(), bytes);
  ASSERT_EQ(
      ::madvise(const_cast<char*>(m.view().data()), 8 * page, MADV_DONTNEED),
      0);
  EXPECT_EQ(m.view(), bytes);
}

TEST(MappedFileDeathTest, AFileTruncatedUnderItsMappingExitsWithTheMessage) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f";
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  Write(path, Pattern(4 * page));
  EXPECT_EXIT(
      {
        ExitOnBusError("tool: error: input shrank");
        MappedFile m = MappedFile::Open(path, 0, UINT64_MAX);
        if (!m.mapped()) ::_exit(3);
        if (::truncate(path.c_str(), 0) != 0) ::_exit(4);
        volatile char c = m.view()[3 * page];  // past the new end
        (void)c;
        ::_exit(5);
      },
      ::testing::ExitedWithCode(1), "^tool: error: input shrank\n$");
}

}  // namespace
}  // namespace reshard::internal
