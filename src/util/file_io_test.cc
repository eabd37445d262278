// PreadvAll: scattered buffers filled in order from one offset, short files
// named; PreadAll and PwriteAll round trips.

#include "util/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
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

TEST_F(FileIoTest, PreadAllReadsOneRange) {
  std::string got(300, '\0');
  ASSERT_OK(PreadAll(fd_.get(), got.data(), got.size(), 1234, path_));
  EXPECT_EQ(got, bytes_.substr(1234, 300));
}

}  // namespace
}  // namespace reshard::internal
