#include "util/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace reshard::internal {
namespace {

// Every length around the streaming threshold and block size, from and to
// every alignment within a line: the bytes are those of memcpy and nothing
// outside [dst, dst + n) is written.
TEST(StreamCopyTest, CopiesExactlyTheBytesAtAnyAlignmentAndLength) {
  std::vector<uint8_t> src(4096 + 128);
  for (size_t i = 0; i < src.size(); ++i) {
    src[i] = static_cast<uint8_t>(i * 131 + 7);
  }
  const size_t lengths[] = {0,   1,   31,  64,  255,  256,  257,
                            383, 384, 511, 512, 1000, 1024, 4096};
  for (size_t n : lengths) {
    for (size_t from = 0; from < 64; from += 13) {
      for (size_t to = 0; to < 64; to += 7) {
        std::vector<uint8_t> dst(4096 + 256, 0xA5);
        StreamCopy(dst.data() + 64 + to, src.data() + from, n);
        StreamFence();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= 64 + to && i < 64 + to + n;
          const uint8_t want = inside ? src[i - 64 - to + from] : 0xA5;
          ASSERT_EQ(dst[i], want)
              << "n " << n << " from " << from << " to " << to << " byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace reshard::internal
