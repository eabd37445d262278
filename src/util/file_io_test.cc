// PreadvAll: scattered buffers filled in order from one offset, short files
// named; PreadAll and PwriteAll round trips (also over several write
// calls). Bounded whole-file reads
// (ReadFdBounded, ReadFileBounded) and output files (WriteOutputFile): the
// regressions of the unbounded reads and the replaced outputs.

#include "util/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/data";
    fd_ = FileDescriptor(::open(path_.c_str(), O_RDWR | O_CREAT, 0600));
    ASSERT_TRUE(fd_.valid());
    for (int i = 0; i < 5000; ++i) bytes_.push_back(static_cast<char>(i * 7));
    ASSERT_OK(PwriteAll(fd_.get(), bytes_.data(), bytes_.size(), 0, path_));
  }

  testing::TempDir dir_;
  std::string path_;
  FileDescriptor fd_;
  std::string bytes_;
};

TEST_F(FileIoTest, PreadvFillsEveryBufferInOrder) {
  // More buffers than one preadv takes (IOV_MAX), empty ones among them.
  std::vector<std::string> out;
  for (int i = 0; i < 2000; ++i) out.emplace_back(i % 3, '\0');
  std::vector<ReadBuffer> buffers;
  uint64_t total = 0;
  for (auto& s : out) {
    buffers.push_back({s.data(), s.size()});
    total += s.size();
  }
  ASSERT_LT(total + 17, bytes_.size());
  ASSERT_OK(PreadvAll(fd_.get(), buffers, 17, path_));
  std::string joined;
  for (const auto& s : out) joined += s;
  EXPECT_EQ(joined, bytes_.substr(17, total));
}

TEST_F(FileIoTest, ShortFileIsDataLossNamingThePathAndRange) {
  std::string a(10, '\0'), b(100, '\0');
  const Status st = PreadvAll(
      fd_.get(), {{a.data(), a.size()}, {b.data(), b.size()}}, 4950, path_);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), path_ +
                              " is short: bytes [5000, 5060) are past its end "
                              "(was it truncated?)");
  EXPECT_EQ(a, bytes_.substr(4950, 10));
}

TEST_F(FileIoTest, PwriteAllWritesMoreThanOneCallsWorthExactly) {
  // Two and a half calls' worth (kMaxWriteCall each) at an odd offset.
  std::string big(kMaxWriteCall * 5 / 2 + 3, '\0');
  for (size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  ASSERT_OK(PwriteAll(fd_.get(), big.data(), big.size(), 4001, path_));
  std::string got(big.size(), '\0');
  ASSERT_OK(PreadAll(fd_.get(), got.data(), got.size(), 4001, path_));
  EXPECT_EQ(got, big);
  std::string head(4001, '\0');
  ASSERT_OK(PreadAll(fd_.get(), head.data(), head.size(), 0, path_));
  EXPECT_EQ(head, bytes_.substr(0, 4001));
}

TEST_F(FileIoTest, PreadAllReadsOneRange) {
  std::string got(300, '\0');
  ASSERT_OK(PreadAll(fd_.get(), got.data(), got.size(), 1234, path_));
  EXPECT_EQ(got, bytes_.substr(1234, 300));
}

// ---- bounded reads

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The directory's entries, sorted: nothing beside the target may change.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ReadBoundedTest, ReadsAFileOfExactlyTheCap) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f";
  WriteText(path, std::string(1000, 'x'));
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFileBounded(path, 1000));
  EXPECT_EQ(text, std::string(1000, 'x'));
  const Status st = ReadFileBounded(path, 999, "the cap of tests").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            path + " is larger than 999 bytes (the cap of tests)");
}

TEST(ReadBoundedTest, ReadBoundedRefusesASparseTenTerabyteFileBySize) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/huge.json";
  {
    FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT, 0644));
    ASSERT_TRUE(fd.valid());
    if (::ftruncate(fd.get(), off_t{10} << 40) != 0) {
      GTEST_SKIP() << "no 10 TB sparse files here";
    }
  }
  const Status st = ReadFileBounded(path, uint64_t{4} << 30).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), path + " is larger than 4294967296 bytes");
}

TEST(ReadBoundedTest, ReadBoundedStopsAtTheCapOnDevZero) {
  // No size to trust: the read itself stops one byte past the cap.
  FileDescriptor fd(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  const Status st = ReadFdBounded(fd.get(), 1 << 20, "/dev/zero").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "/dev/zero is larger than 1048576 bytes");
}

TEST(ReadBoundedTest, ReadBoundedStopsAtTheCapOnAFifo) {
  ::signal(SIGPIPE, SIG_IGN);  // the writer outlives the reader
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  FileDescriptor read_end(ends[0]);
  std::thread writer([w = FileDescriptor(ends[1])] {
    const std::string chunk(1 << 16, 'a');
    for (int i = 0; i < 64; ++i) {
      if (::write(w.get(), chunk.data(), chunk.size()) < 0) break;
    }
  });
  const Status st =
      ReadFdBounded(read_end.get(), 100000, "standard input").status();
  read_end.Reset();  // the writer's next write fails
  writer.join();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "standard input is larger than 100000 bytes");
}

// Inputs named by a path are regular files, opened without blocking: the
// probe's FIFO with no writer hung every reader of it.
TEST(ReadBoundedTest, FifoWithNoWriterIsRefusedAtOnceNotWaitedFor) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = ReadFileBounded(path, 100000).status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), path + " is not a regular file (a FIFO)");
  struct stat sb;
  ASSERT_EQ(::lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISFIFO(sb.st_mode));
  // Devices and directories alike, through a symbolic link too.
  EXPECT_EQ(ReadFileBounded("/dev/zero", 10).status().message(),
            "/dev/zero is not a regular file (a character device)");
  EXPECT_EQ(ReadFileBounded(dir.path(), 10).status().message(),
            dir.path() + " is not a regular file (a directory)");
  ASSERT_EQ(::symlink(path.c_str(), (dir.path() + "/link").c_str()), 0);
  EXPECT_EQ(ReadFileBounded(dir.path() + "/link", 10).status().message(),
            dir.path() + "/link is not a regular file (a FIFO)");
}

TEST(ReadBoundedTest, MissingFileIsNotFound) {
  const Status st = ReadFileBounded("/nonexistent/x.json", 10).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(),
            "cannot read /nonexistent/x.json: No such file or directory");
}

// ---- output files

TEST(WriteOutputTest, WritesANewFileAndLeavesNothingElse) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/out.json";
  ASSERT_OK(WriteOutputFile("-o", path, "hello"));
  EXPECT_EQ(Slurp(path), "hello");
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"out.json"});
  struct stat sb;
  ASSERT_EQ(::stat(path.c_str(), &sb), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(sb.st_mode & 0777, 0666 & ~mask);
}

TEST(WriteOutputTest, ReplacesARegularFileKeepingItsMode) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/out.json";
  WriteText(path, "old old old");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  ASSERT_OK(WriteOutputFile("-o", path, "new"));
  EXPECT_EQ(Slurp(path), "new");
  struct stat sb;
  ASSERT_EQ(::stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0640);
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"out.json"});
}

TEST(WriteOutputTest, OutputsWriteThroughASymbolicLink) {
  testing::TempDir dir;
  const std::string target = dir.path() + "/real.html";
  const std::string link = dir.path() + "/link.html";
  WriteText(target, "old");
  ASSERT_EQ(::symlink("real.html", link.c_str()), 0);
  ASSERT_OK(WriteOutputFile("--html", link, "report"));
  struct stat sb;
  ASSERT_EQ(::lstat(link.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISLNK(sb.st_mode));
  EXPECT_EQ(Slurp(target), "report");
  EXPECT_EQ(Entries(dir.path()),
            (std::vector<std::string>{"link.html", "real.html"}));
}

TEST(WriteOutputTest, OutputsRefuseADanglingSymbolicLink) {
  testing::TempDir dir;
  const std::string link = dir.path() + "/link.html";
  ASSERT_EQ(::symlink("missing.html", link.c_str()), 0);
  const Status st = WriteOutputFile("--html", link, "report");
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_EQ(st.message(), "--html " + link +
                              ": is a symbolic link to nothing usable: No "
                              "such file or directory");
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"link.html"});
}

TEST(WriteOutputTest, OutputsNeverReplaceAFifo) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const Status st = WriteOutputFile("--svg", path, "<svg/>");
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_EQ(st.message(),
            "--svg " + path + ": cannot write: a FIFO with no reader");
  struct stat sb;
  ASSERT_EQ(::lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISFIFO(sb.st_mode));
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"fifo"});
  // With a reader, the bytes go through the FIFO itself.
  std::string got;
  std::thread reader([&] { got = Slurp(path); });
  // The reader may not have opened yet: retry until it has.
  Status written;
  for (int i = 0; i < 500; ++i) {
    written = WriteOutputFile("--svg", path, "<svg/>");
    if (written.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_OK(written);
  reader.join();
  EXPECT_EQ(got, "<svg/>");
  ASSERT_EQ(::lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISFIFO(sb.st_mode));
}

TEST(WriteOutputTest, OutputsNeverReplaceADeviceNode) {
  testing::TempDir dir;
  // Device nodes of the test's own: a null device and a full one.
  const std::string null_node = dir.path() + "/null";
  const std::string full_node = dir.path() + "/full";
  if (::mknod(null_node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 ||
      ::mknod(full_node.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    GTEST_SKIP() << "cannot make device nodes here (not root)";
  }
  ASSERT_OK(WriteOutputFile("--html", null_node, std::string(347000, 'x')));
  const Status st = WriteOutputFile("-o", full_node, "{}");
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_EQ(st.message(),
            "-o " + full_node + ": cannot write: No space left on device");
  for (const std::string& p : {null_node, full_node}) {
    struct stat sb;
    ASSERT_EQ(::lstat(p.c_str(), &sb), 0);
    EXPECT_TRUE(S_ISCHR(sb.st_mode)) << p;
  }
  EXPECT_EQ(Entries(dir.path()), (std::vector<std::string>{"full", "null"}));
}

TEST(WriteOutputTest, OutputsRefuseADirectory) {
  testing::TempDir dir;
  const std::string sub = dir.path() + "/d";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const Status st = WriteOutputFile("--html", sub, "x");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "--html " + sub +
                              ": is a directory; an output must be a regular "
                              "file, a character device or a FIFO");
  EXPECT_TRUE(std::filesystem::is_empty(sub));
}

TEST(WriteOutputTest, PartialOutputIsRemovedOnAFailedWrite) {
  // A file size limit stands in for a full disk: the write fails part way.
  testing::TempDir dir;
  const std::string path = dir.path() + "/out.json";
  const std::string kept = dir.path() + "/kept.json";
  WriteText(kept, "previous");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string big(1 << 20, 'x');
    const Status a = WriteOutputFile("-o", path, big);
    const Status b = WriteOutputFile("-o", kept, big);
    const bool ok =
        a.code() == StatusCode::kIOError &&
        a.message() == "-o " + path + ": cannot write: File too large" &&
        b.code() == StatusCode::kIOError;
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"kept.json"});
  EXPECT_EQ(Slurp(kept), "previous");
}

}  // namespace
}  // namespace reshard::internal
