// HostDeviceApi's copies, byte for byte, and each of its refusals with
// its exact message. Sources hold bytes derived from their index,
// destinations start as a sentinel, and every destination byte is
// checked: those copied against a reference loop over (x, y, z), the
// others against the sentinel.
#include "exec_cuda/host_device_api.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::StatusIs;

constexpr uint8_t kSentinel = 0xEE;

// A byte derived from its index, never the sentinel.
uint8_t Pattern(size_t i) {
  const auto v = static_cast<uint8_t>(i * 37 + (i >> 8) * 11 + 1);
  return v == kSentinel ? 0x11 : v;
}

std::vector<uint8_t> Bytes(const uint8_t* p, size_t n) {
  return std::vector<uint8_t>(p, p + n);
}

// `dst_before` after the copy `c` from `src`, element by element.
std::vector<uint8_t> Expected3D(const uint8_t* src, const Copy3D& c,
                                std::vector<uint8_t> dst_before) {
  for (size_t z = 0; z < c.extent.depth; ++z) {
    for (size_t y = 0; y < c.extent.height; ++y) {
      for (size_t x = 0; x < c.extent.width; ++x) {
        const size_t s = (c.src_pos.z + z) * c.src.pitch * c.src.ysize +
                         (c.src_pos.y + y) * c.src.pitch + c.src_pos.x + x;
        const size_t d = (c.dst_pos.z + z) * c.dst.pitch * c.dst.ysize +
                         (c.dst_pos.y + y) * c.dst.pitch + c.dst_pos.x + x;
        dst_before[d] = src[s];
      }
    }
  }
  return dst_before;
}

bool OnDeviceSrc(CopyKind k) {
  return k == CopyKind::kDeviceToHost || k == CopyKind::kDeviceToDevice;
}
bool OnDeviceDst(CopyKind k) {
  return k == CopyKind::kHostToDevice || k == CopyKind::kDeviceToDevice;
}

class HostDeviceApiTest : public ::testing::Test {
 protected:
  void SetUp() override { Remake({.devices = 2}); }

  void Remake(HostDeviceApiOptions options) {
    api_ = HostDeviceApi::Make(std::move(options));
    stream_ = api_->CreateStream(0).ValueOrDie();
  }

  // `bytes` of memory of `device` (host memory for -1), filled with the
  // pattern or the sentinel.
  uint8_t* Alloc(int device, size_t bytes, bool pattern) {
    uint8_t* p = nullptr;
    if (device < 0) {
      host_.emplace_back(bytes);
      p = host_.back().data();
    } else {
      p = static_cast<uint8_t*>(api_->Malloc(device, bytes).ValueOrDie());
    }
    for (size_t i = 0; i < bytes; ++i) p[i] = pattern ? Pattern(i) : kSentinel;
    return p;
  }

  // Copy3DAsync then SynchronizeStream, checking every byte of `dst`.
  void CopyAndCheck(const Copy3D& c, size_t dst_bytes) {
    const auto* src = static_cast<const uint8_t*>(c.src.ptr);
    auto* dst = static_cast<uint8_t*>(c.dst.ptr);
    const std::vector<uint8_t> before = Bytes(dst, dst_bytes);
    ASSERT_OK(api_->Copy3DAsync(c, stream_));
    EXPECT_EQ(Bytes(dst, dst_bytes), before) << "bytes before Synchronize";
    ASSERT_OK(api_->SynchronizeStream(stream_));
    EXPECT_EQ(Bytes(dst, dst_bytes), Expected3D(src, c, before));
  }

  Status Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                size_t width, size_t height, CopyKind kind) {
    return api_->Copy2DAsync(dst, dpitch, src, spitch, width, height, kind,
                             stream_);
  }

  std::unique_ptr<HostDeviceApi> api_;
  StreamHandle stream_ = 0;
  std::deque<std::vector<uint8_t>> host_;
};

// A 3D copy with positions on both sides, other pitches and slice heights
// on each; the first and last elements by hand, then every byte.
TEST_F(HostDeviceApiTest, Copy3DWithOffsetsEveryKind) {
  for (CopyKind kind :
       {CopyKind::kHostToHost, CopyKind::kHostToDevice, CopyKind::kDeviceToHost,
        CopyKind::kDeviceToDevice, CopyKind::kDefault}) {
    SCOPED_TRACE(std::string(CopyKindName(kind)));
    const bool src_dev = OnDeviceSrc(kind) || kind == CopyKind::kDefault;
    const bool dst_dev = OnDeviceDst(kind) || kind == CopyKind::kDefault;
    uint8_t* src = Alloc(src_dev ? 0 : -1, 40 * 7 * 4, true);
    uint8_t* dst = Alloc(dst_dev ? 0 : -1, 33 * 9 * 5, false);
    Copy3D c;
    c.src = {src, 40, 40, 7};
    c.src_pos = {3, 2, 1};
    c.dst = {dst, 33, 33, 9};
    c.dst_pos = {5, 1, 2};
    c.extent = {17, 4, 3};
    c.kind = kind;
    CopyAndCheck(c, 33 * 9 * 5);
    // (3, 2, 1) of the source is byte 1*280 + 2*40 + 3; (5, 1, 2) of the
    // destination byte 2*297 + 1*33 + 5. The last element: (19, 5, 3) to
    // (21, 4, 4).
    EXPECT_EQ(dst[632], Pattern(363));
    EXPECT_EQ(dst[631], kSentinel);
    EXPECT_EQ(dst[1341], Pattern(1059));
    EXPECT_EQ(dst[1342], kSentinel);
  }
  const HostDeviceApiCounters n = api_->counters();
  EXPECT_EQ(n.copies_run, 5u);
  EXPECT_EQ(n.bytes_copied, 5u * 17 * 4 * 3);
}

// With depth 1 the slice height only places slice pos.z: the rows may run
// past ysize.
TEST_F(HostDeviceApiTest, Copy3DOneSliceRowsPastYsize) {
  uint8_t* src = Alloc(-1, 256, true);
  uint8_t* dst = Alloc(0, 512, false);
  Copy3D c;
  c.src = {src, 16, 16, 2};
  c.src_pos = {1, 3, 2};  // slice 2 starts at 2 * 16 * 2 = 64
  c.dst = {dst, 24, 24, 3};
  c.dst_pos = {4, 0, 1};  // slice 1 starts at 24 * 3 = 72
  c.extent = {5, 6, 1};
  c.kind = CopyKind::kHostToDevice;
  CopyAndCheck(c, 512);
  EXPECT_EQ(dst[72 + 4], Pattern(64 + 3 * 16 + 1));
  EXPECT_EQ(dst[72 + 5 * 24 + 8], Pattern(64 + 8 * 16 + 5));
}

TEST_F(HostDeviceApiTest, Copy2DEveryKind) {
  for (CopyKind kind :
       {CopyKind::kHostToHost, CopyKind::kHostToDevice, CopyKind::kDeviceToHost,
        CopyKind::kDeviceToDevice, CopyKind::kDefault}) {
    SCOPED_TRACE(std::string(CopyKindName(kind)));
    uint8_t* src = Alloc(OnDeviceSrc(kind) ? 0 : -1, 7 * 4, true);
    uint8_t* dst = Alloc(OnDeviceDst(kind) ? 0 : -1, 9 * 4, false);
    ASSERT_OK(Copy2D(dst, 9, src, 7, 5, 4, kind));
    EXPECT_EQ(Bytes(dst, 36), std::vector<uint8_t>(36, kSentinel));
    ASSERT_OK(api_->SynchronizeStream(stream_));
    std::vector<uint8_t> want(36, kSentinel);
    for (size_t y = 0; y < 4; ++y) {
      for (size_t x = 0; x < 5; ++x) want[y * 9 + x] = Pattern(y * 7 + x);
    }
    EXPECT_EQ(Bytes(dst, 36), want);
  }
}

// A 2D copy with offsets: pointers into the middle of the buffers.
TEST_F(HostDeviceApiTest, Copy2DIntoTheMiddleOfAllocations) {
  uint8_t* src = Alloc(0, 200, true);
  uint8_t* dst = Alloc(1, 300, false);
  auto dev1 = api_->CreateStream(1).ValueOrDie();
  ASSERT_OK(api_->EnablePeerAccess(1, 0));
  ASSERT_OK(api_->Copy2DAsync(dst + 17, 31, src + 11, 13, 6, 5,
                              CopyKind::kDeviceToDevice, dev1));
  ASSERT_OK(api_->SynchronizeStream(dev1));
  std::vector<uint8_t> want(300, kSentinel);
  for (size_t y = 0; y < 5; ++y) {
    for (size_t x = 0; x < 6; ++x) {
      want[17 + y * 31 + x] = Pattern(11 + y * 13 + x);
    }
  }
  EXPECT_EQ(Bytes(dst, 300), want);
}

TEST_F(HostDeviceApiTest, ZeroExtentsAreNoOps) {
  uint8_t* dst = Alloc(0, 64, false);
  for (const Extent& e : {Extent{0, 4, 2}, Extent{8, 0, 2}, Extent{8, 4, 0}}) {
    Copy3D c;  // null source: a zero extent touches nothing
    c.dst = {dst, 8, 8, 4};
    c.extent = e;
    EXPECT_OK(api_->Copy3DAsync(c, stream_));
  }
  EXPECT_OK(Copy2D(dst, 8, nullptr, 8, 0, 4, CopyKind::kHostToDevice));
  EXPECT_OK(Copy2D(nullptr, 8, nullptr, 8, 8, 0, CopyKind::kHostToDevice));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(Bytes(dst, 64), std::vector<uint8_t>(64, kSentinel));
  EXPECT_EQ(api_->counters().copies_run, 0u);
  // A zero extent does not excuse a bad stream or kind.
  EXPECT_THAT(Copy2D(nullptr, 0, nullptr, 0, 0, 0, CopyKind{9}),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidMemcpyDirection: kind 9 is not a "
                       "cudaMemcpyKind (0 to 4)"));
}

// Source and destination in one buffer: interleaved rows that share no
// byte are a valid copy; rows that share bytes are refused.
TEST_F(HostDeviceApiTest, OverlapRefusedInterleavingAllowed) {
  uint8_t* buf = Alloc(0, 128, true);
  ASSERT_OK(Copy2D(buf + 8, 16, buf, 16, 8, 8, CopyKind::kDeviceToDevice));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  for (size_t y = 0; y < 8; ++y) {
    for (size_t x = 0; x < 16; ++x) {
      EXPECT_EQ(buf[y * 16 + x], Pattern(y * 16 + x % 8)) << y << "," << x;
    }
  }
  EXPECT_THAT(
      Copy2D(buf + 20, 16, buf, 16, 8, 4, CopyKind::kDeviceToDevice),
      StatusIs(StatusCode::kInvalidArgument,
               "overlapping source and destination (undefined in CUDA): "
               "source row 1 and destination row 0 of the copy share bytes "
               "(rows count slice by slice)"));
  Copy3D c;  // slice 1 of the source is slice 0 of the destination
  c.src = {buf, 8, 8, 4};
  c.dst = {buf + 32, 8, 8, 4};
  c.extent = {8, 4, 2};
  EXPECT_THAT(api_->Copy3DAsync(c, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "overlapping source and destination (undefined in "
                       "CUDA): source row 4 and destination row 0 of the "
                       "copy share bytes (rows count slice by slice)"));
}

// Each shape refusal of cudaMemcpy3D, source side then destination side.
TEST_F(HostDeviceApiTest, Copy3DShapeRefusals) {
  uint8_t* a = Alloc(0, 4096, true);
  uint8_t* b = Alloc(0, 4096, false);
  auto refused = [&](auto edit, const std::string& message) {
    Copy3D c;
    c.src = {a, 64, 64, 8};
    c.dst = {b, 64, 64, 8};
    c.extent = {16, 4, 2};
    c.kind = CopyKind::kDeviceToDevice;
    edit(c);
    EXPECT_THAT(api_->Copy3DAsync(c, stream_),
                StatusIs(StatusCode::kInvalidArgument, message));
  };
  refused([](Copy3D& c) { c.src.ptr = nullptr; },
          "cudaErrorInvalidValue: srcPtr.ptr is null");
  refused([](Copy3D& c) { c.dst.ptr = nullptr; },
          "cudaErrorInvalidValue: dstPtr.ptr is null");
  refused([](Copy3D& c) { c.dst.pitch = size_t{1} << 32; },
          "cudaErrorInvalidPitchValue: dstPtr.pitch 4294967296 exceeds the "
          "maximum pitch 2147483647");
  refused([](Copy3D& c) { c.src.pitch = 2147483648; },
          "cudaErrorInvalidPitchValue: srcPtr.pitch 2147483648 exceeds the "
          "maximum pitch 2147483647");
  refused([](Copy3D& c) { c.src_pos.x = 49; },
          "cudaErrorInvalidValue: srcPos.x 49 + extent.width 16 exceeds "
          "srcPtr.pitch 64");
  refused([](Copy3D& c) { c.dst.pitch = 15; },
          "cudaErrorInvalidValue: dstPos.x 0 + extent.width 16 exceeds "
          "dstPtr.pitch 15");
  refused([](Copy3D& c) { c.src_pos.y = 5; },
          "cudaErrorInvalidValue: srcPos.y 5 + extent.height 4 exceeds "
          "srcPtr.ysize 8, the slice height of a copy of extent.depth 2");
  refused([](Copy3D& c) { c.dst.ysize = 3; },
          "cudaErrorInvalidValue: dstPos.y 0 + extent.height 4 exceeds "
          "dstPtr.ysize 3, the slice height of a copy of extent.depth 2");
  refused([](Copy3D& c) { c.kind = CopyKind{5}; },
          "cudaErrorInvalidMemcpyDirection: kind 5 is not a cudaMemcpyKind "
          "(0 to 4)");
  // Exactly at the pitch and the slice height is fine.
  Copy3D fits;
  fits.src = {a, 64, 64, 8};
  fits.src_pos = {48, 4, 0};
  fits.dst = {b, 64, 64, 8};
  fits.extent = {16, 4, 2};
  EXPECT_OK(api_->Copy3DAsync(fits, stream_));
}

TEST_F(HostDeviceApiTest, Copy2DRefusals) {
  uint8_t* a = Alloc(0, 4096, true);
  uint8_t* b = Alloc(0, 4096, false);
  const CopyKind d2d = CopyKind::kDeviceToDevice;
  EXPECT_THAT(Copy2D(b, 64, nullptr, 64, 8, 8, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: src is null"));
  EXPECT_THAT(Copy2D(nullptr, 64, a, 64, 8, 8, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: dst is null"));
  EXPECT_THAT(Copy2D(b, 64, a, size_t{1} << 31, 8, 1, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidPitchValue: spitch 2147483648 "
                       "exceeds the maximum pitch 2147483647"));
  EXPECT_THAT(Copy2D(b, size_t{1} << 32, a, 64, 8, 1, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidPitchValue: dpitch 4294967296 "
                       "exceeds the maximum pitch 2147483647"));
  EXPECT_THAT(Copy2D(b, 64, a, 32, 33, 2, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidPitchValue: width 33 exceeds "
                       "spitch 32"));
  EXPECT_THAT(Copy2D(b, 16, a, 64, 17, 2, d2d),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidPitchValue: width 17 exceeds "
                       "dpitch 16"));
  EXPECT_THAT(Copy2D(b, 64, a, 64, 8, 8, CopyKind{200}),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidMemcpyDirection: kind 200 is not a "
                       "cudaMemcpyKind (0 to 4)"));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(api_->counters().copies_run, 0u) << "a refusal queues nothing";
}

// The kind against where the pointers are: stricter than the runtime
// under unified addressing, which CUDA documents as undefined.
TEST_F(HostDeviceApiTest, KindMustMatchThePointers) {
  uint8_t* dev = Alloc(0, 256, true);
  uint8_t* host = Alloc(-1, 256, false);
  uint8_t* host2 = Alloc(-1, 256, false);
  auto refused = [&](void* dst, const void* src, CopyKind kind,
                     const std::string& message) {
    EXPECT_THAT(Copy2D(dst, 16, src, 16, 16, 4, kind),
                StatusIs(StatusCode::kInvalidArgument, message));
  };
  refused(host, host2, CopyKind::kHostToDevice,
          "cudaErrorInvalidMemcpyDirection: kind HostToDevice but dst is "
          "host memory");
  refused(dev + 128, dev, CopyKind::kHostToDevice,
          "cudaErrorInvalidMemcpyDirection: kind HostToDevice but src is "
          "memory of device 0");
  refused(host, host2, CopyKind::kDeviceToHost,
          "cudaErrorInvalidMemcpyDirection: kind DeviceToHost but src is "
          "host memory");
  refused(dev + 128, dev, CopyKind::kDeviceToHost,
          "cudaErrorInvalidMemcpyDirection: kind DeviceToHost but dst is "
          "memory of device 0");
  refused(host, dev, CopyKind::kDeviceToDevice,
          "cudaErrorInvalidMemcpyDirection: kind DeviceToDevice but dst is "
          "host memory");
  refused(dev, host, CopyKind::kHostToHost,
          "cudaErrorInvalidMemcpyDirection: kind HostToHost but dst is "
          "memory of device 0");
  Copy3D c;
  c.src = {host, 16, 16, 4};
  c.dst = {host2, 16, 16, 4};
  c.extent = {16, 4, 1};
  c.kind = CopyKind::kDeviceToDevice;
  EXPECT_THAT(api_->Copy3DAsync(c, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidMemcpyDirection: kind DeviceToDevice "
                       "but srcPtr.ptr is host memory"));
}

// A device side must end inside its allocation; exactly at the end is
// fine.
TEST_F(HostDeviceApiTest, DeviceRangesStayInsideTheirAllocation) {
  uint8_t* dev = Alloc(0, 1000, true);
  uint8_t* host = Alloc(-1, 4096, false);
  // 4 rows of 16 at pitch 32 from dev + 900: reach 3 * 32 + 16 = 112.
  EXPECT_THAT(Copy2D(host, 32, dev + 900, 32, 16, 4, CopyKind::kDeviceToHost),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: the copy reaches 112 bytes "
                       "past src, beyond the end of its allocation on "
                       "device 0 (100 bytes past src)"));
  EXPECT_THAT(Copy2D(host, 32, dev + 889, 32, 16, 4, CopyKind::kDeviceToHost),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: the copy reaches 112 bytes "
                       "past src, beyond the end of its allocation on "
                       "device 0 (111 bytes past src)"));
  EXPECT_OK(Copy2D(host, 32, dev + 888, 32, 16, 4, CopyKind::kDeviceToHost));
  // Slices of 32 * 8 bytes; from (4, 4, 3) the copy reaches
  // 3 * 256 + (4 + 3) * 32 + 4 + 16 bytes, from (4, 4, 2) 256 fewer.
  Copy3D c;
  c.src = {host, 32, 32, 8};
  c.dst = {dev, 32, 32, 8};
  c.dst_pos = {4, 4, 3};
  c.extent = {16, 4, 1};
  c.kind = CopyKind::kHostToDevice;
  EXPECT_THAT(api_->Copy3DAsync(c, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: the copy reaches 1012 bytes "
                       "past dstPtr.ptr, beyond the end of its allocation "
                       "on device 0 (1000 bytes past dstPtr.ptr)"));
  c.dst_pos.z = 2;
  EXPECT_OK(api_->Copy3DAsync(c, stream_));
}

// Every multiplication and sum of the address arithmetic is guarded.
TEST_F(HostDeviceApiTest, OverflowGuards) {
  Remake({.devices = 1, .max_pitch = SIZE_MAX});
  uint8_t* a = Alloc(-1, 64, true);
  uint8_t* b = Alloc(-1, 64, false);
  const size_t big = size_t{1} << 63;
  auto refused = [&](auto edit, const std::string& message) {
    Copy3D c;
    c.src = {a, 64, 64, 8};
    c.dst = {b, 64, 64, 8};
    c.extent = {16, 4, 1};
    c.kind = CopyKind::kHostToHost;
    edit(c);
    EXPECT_THAT(api_->Copy3DAsync(c, stream_),
                StatusIs(StatusCode::kInvalidArgument, message));
  };
  refused([](Copy3D& c) { c.src_pos.x = SIZE_MAX; },
          "cudaErrorInvalidValue: srcPos.x 18446744073709551615 + "
          "extent.width 16 overflows size_t");
  refused(
      [](Copy3D& c) {
        c.dst_pos.y = SIZE_MAX;
        c.extent.depth = 2;
      },
      "cudaErrorInvalidValue: dstPos.y 18446744073709551615 + extent.height "
      "4 overflows size_t");
  refused(
      [](Copy3D& c) {
        c.src_pos.z = SIZE_MAX - 1;
        c.extent.depth = 3;
      },
      "cudaErrorInvalidValue: srcPos.z 18446744073709551614 + extent.depth 3 "
      "- 1 overflows size_t");
  refused(
      [](Copy3D& c) {
        c.src.ysize = size_t{1} << 60;
        c.extent.depth = 2;
      },
      "cudaErrorInvalidValue: srcPtr.pitch 64 * srcPtr.ysize "
      "1152921504606846976 overflows size_t");
  // 16 slices of 2^60 bytes are 2^64.
  refused(
      [](Copy3D& c) {
        c.dst.ysize = size_t{1} << 54;
        c.dst_pos.z = 16;
      },
      "cudaErrorInvalidValue: (dstPos.z 16 + extent.depth 1 - 1) * "
      "dstPtr.pitch 64 * dstPtr.ysize 18014398509481984 overflows size_t");
  refused([](Copy3D& c) { c.src_pos.y = SIZE_MAX - 2; },
          "cudaErrorInvalidValue: srcPos.y 18446744073709551613 + "
          "extent.height 4 - 1 overflows size_t");
  refused([](Copy3D& c) { c.src_pos.y = size_t{1} << 60; },
          "cudaErrorInvalidValue: (srcPos.y 1152921504606846976 + "
          "extent.height 4 - 1) * srcPtr.pitch 64 overflows size_t");
  refused(
      [&](Copy3D& c) {
        c.dst.pitch = big;
        c.dst_pos.x = big - 16;
        c.extent.height = 2;
      },
      "cudaErrorInvalidValue: the offset of the end of the bytes copied at "
      "dstPtr.ptr overflows size_t");
  refused(
      [&](Copy3D& c) {
        c.src.pitch = big;
        c.src_pos.x = big - 32;
        c.extent.height = 2;
      },
      "cudaErrorInvalidValue: srcPtr.ptr + 18446744073709551600 (the end "
      "of the bytes copied) overflows the address space");
  EXPECT_THAT(Copy2D(b, 8, a, 16, 8, size_t{1} << 62, CopyKind::kHostToHost),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: (height 4611686018427387904 - "
                       "1) * spitch 16 overflows size_t"));
}

TEST_F(HostDeviceApiTest, UnknownStreamsAreRefused) {
  uint8_t* a = Alloc(-1, 64, true);
  uint8_t* b = Alloc(-1, 64, false);
  const std::string unknown =
      " is not a live stream of this HostDeviceApi (never created, or "
      "destroyed)";
  EXPECT_THAT(api_->Copy2DAsync(b, 8, a, 8, 8, 8, CopyKind::kHostToHost, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 0" + unknown));
  ASSERT_OK(api_->DestroyStream(stream_));
  Copy3D c;
  EXPECT_THAT(api_->Copy3DAsync(c, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 1" + unknown));
  EXPECT_THAT(api_->SynchronizeStream(stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 1" + unknown));
  EXPECT_THAT(api_->DestroyStream(stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 1" + unknown));
  EXPECT_THAT(api_->RecordEvent(7),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 7" + unknown));
  EXPECT_THAT(api_->LaunchGatherScatter(GatherScatterArgs{}, 7),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: stream 7" + unknown));
  const std::string no_event =
      " is not a live event of this HostDeviceApi (never recorded, or "
      "destroyed)";
  EXPECT_THAT(api_->EventDone(3),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: event 3" + no_event));
  EXPECT_THAT(api_->DestroyEvent(3),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: event 3" + no_event));
  EXPECT_THAT(api_->CreateStream(2),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device 2 is not one of the 2 "
                       "emulated devices"));
}

TEST_F(HostDeviceApiTest, MemoryAndPointers) {
  uint8_t* dev = static_cast<uint8_t*>(api_->Malloc(1, 1000).ValueOrDie());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dev) % 256, 0u);
  EXPECT_EQ(Bytes(dev, 1000), std::vector<uint8_t>(1000, 0xDB));
  for (size_t at : {0, 1, 500, 999}) {
    EXPECT_EQ(api_->Pointer(dev + at).ValueOrDie().device, 1) << at;
  }
  EXPECT_EQ(api_->Pointer(dev + 1000).ValueOrDie().device, -1);
  EXPECT_EQ(api_->Pointer(dev - 1).ValueOrDie().device, -1);
  int host = 0;
  EXPECT_EQ(api_->Pointer(&host).ValueOrDie().device, -1);
  EXPECT_EQ(api_->Pointer(nullptr).ValueOrDie().device, -1);
  EXPECT_EQ(api_->Malloc(0, 0).ValueOrDie(), nullptr);
  EXPECT_OK(api_->Free(nullptr));
  EXPECT_THAT(api_->Malloc(-1, 8),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device -1 is not one of the "
                       "2 emulated devices"));
  EXPECT_THAT(api_->Free(dev + 8),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: Free: the pointer lies 8 bytes "
                       "into an allocation of device 1, not at its start"));
  EXPECT_THAT(api_->Free(&host),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: Free: the pointer is not an "
                       "allocation of this HostDeviceApi"));
  ASSERT_OK(api_->Free(dev));
  EXPECT_EQ(api_->Pointer(dev).ValueOrDie().device, -1);
  EXPECT_EQ(api_->DeviceCount().ValueOrDie(), 2);
  EXPECT_EQ(api_->RuntimeVersion(), "emulated");
  EXPECT_EQ(api_->MaxPitch(), 2147483647u);
}

TEST_F(HostDeviceApiTest, MemoryPerDeviceIsALimit) {
  Remake({.devices = 1, .memory_per_device = 1000});
  void* a = api_->Malloc(0, 600).ValueOrDie();
  EXPECT_THAT(api_->Malloc(0, 401),
              StatusIs(StatusCode::kResourceExhausted,
                       "cudaErrorMemoryAllocation: Malloc of 401 bytes on "
                       "device 0 failed (400 bytes free)"));
  ASSERT_OK(api_->Free(a));
  EXPECT_OK(api_->Malloc(0, 1000));
}

TEST_F(HostDeviceApiTest, PeerAccessRules) {
  Remake({.devices = 3, .no_peer_access = {{0, 2}}});
  EXPECT_TRUE(api_->CanAccessPeer(0, 1).ValueOrDie());
  EXPECT_TRUE(api_->CanAccessPeer(2, 1).ValueOrDie());
  EXPECT_FALSE(api_->CanAccessPeer(1, 1).ValueOrDie());
  EXPECT_FALSE(api_->CanAccessPeer(0, 2).ValueOrDie());
  EXPECT_FALSE(api_->CanAccessPeer(2, 0).ValueOrDie()) << "either order";
  EXPECT_THAT(api_->CanAccessPeer(0, 3),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: peer 3 is not one of the 3 "
                       "emulated devices"));
  EXPECT_THAT(api_->EnablePeerAccess(-1, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device -1 is not one of the "
                       "3 emulated devices"));
  EXPECT_THAT(api_->EnablePeerAccess(1, 1),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device 1 cannot enable peer "
                       "access to itself"));
  EXPECT_THAT(api_->EnablePeerAccess(2, 0),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessUnsupported: devices 2 and 0 "
                       "cannot access each other's memory "
                       "(HostDeviceApiOptions::no_peer_access)"));
  EXPECT_OK(api_->EnablePeerAccess(0, 1));
  EXPECT_OK(api_->EnablePeerAccess(0, 1)) << "enabled again";
}

// Work on a stream touches another device's memory only with peer access
// from the stream's device to that one (stricter than the runtime for
// copies, which it stages through the host).
TEST_F(HostDeviceApiTest, CopiesAcrossDevicesNeedPeerAccess) {
  uint8_t* d0 = Alloc(0, 256, true);
  uint8_t* d1 = Alloc(1, 256, false);
  uint8_t* host = Alloc(-1, 256, true);
  const StreamHandle s1 = api_->CreateStream(1).ValueOrDie();  // stream 2
  const CopyKind d2d = CopyKind::kDeviceToDevice;
  EXPECT_THAT(Copy2D(d1, 16, d0, 16, 16, 4, d2d),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessNotEnabled: stream 1 of device 0 "
                       "copies to dst, memory of device 1, without peer "
                       "access from device 0 to device 1"));
  EXPECT_THAT(Copy2D(d1, 16, host, 16, 16, 4, CopyKind::kHostToDevice),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessNotEnabled: stream 1 of device 0 "
                       "copies to dst, memory of device 1, without peer "
                       "access from device 0 to device 1"));
  const auto on_s1 = [&](uint8_t* dst, const uint8_t* src, CopyKind kind) {
    return api_->Copy2DAsync(dst, 16, src, 16, 16, 4, kind, s1);
  };
  EXPECT_THAT(on_s1(d1, d0, d2d),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessNotEnabled: stream 2 of device 1 "
                       "copies from src, memory of device 0, without peer "
                       "access from device 1 to device 0"));
  ASSERT_OK(on_s1(d1, host, CopyKind::kHostToDevice));
  ASSERT_OK(api_->EnablePeerAccess(0, 1));
  ASSERT_OK(Copy2D(d1 + 64, 16, d0 + 64, 16, 16, 4, d2d));
  EXPECT_THAT(on_s1(d1, d0, d2d),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessNotEnabled: stream 2 of device 1 "
                       "copies from src, memory of device 0, without peer "
                       "access from device 1 to device 0"))
      << "access is enabled one way";
  ASSERT_OK(api_->SynchronizeStream(s1));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  std::vector<uint8_t> want(256, kSentinel);
  for (size_t i = 0; i < 128; ++i) want[i] = Pattern(i);
  EXPECT_EQ(Bytes(d1, 256), want);
}

}  // namespace
}  // namespace reshard::cuda
