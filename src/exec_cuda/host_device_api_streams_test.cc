// HostDeviceApi's streams and events (work runs only when the caller
// synchronises, in order), its call log, calls from several threads, and
// the gather/scatter kernel, run through the functions the GPU runs and
// checked byte for byte against a loop over the rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::StatusIs;

constexpr uint8_t kSentinel = 0xEE;

// A byte derived from its index and a seed, never the sentinel.
uint8_t Pattern(size_t i, unsigned seed = 0) {
  const auto v = static_cast<uint8_t>(i * 37 + (i >> 8) * 11 + seed * 101 + 1);
  return v == kSentinel ? 0x11 : v;
}

std::vector<uint8_t> Bytes(const uint8_t* p, size_t n) {
  return std::vector<uint8_t>(p, p + n);
}

class HostDeviceApiStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = HostDeviceApi::Make({.devices = 2});
    stream_ = api_->CreateStream(0).ValueOrDie();
  }

  uint8_t* Device(size_t bytes, int device = 0) {
    auto* p = static_cast<uint8_t*>(api_->Malloc(device, bytes).ValueOrDie());
    std::memset(p, kSentinel, bytes);
    return p;
  }
  std::vector<uint8_t> Source(size_t bytes, unsigned seed) {
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = Pattern(i, seed);
    return v;
  }
  // A contiguous host-to-device copy of `bytes` on `stream`.
  Status Put(uint8_t* dst, const std::vector<uint8_t>& src, size_t bytes,
             StreamHandle stream) {
    return api_->Copy2DAsync(dst, bytes, src.data(), bytes, bytes, 1,
                             CopyKind::kHostToDevice, stream);
  }

  std::unique_ptr<HostDeviceApi> api_;
  StreamHandle stream_ = 0;
};

TEST_F(HostDeviceApiStreamsTest, NothingMovesUntilSynchronize) {
  uint8_t* dst = Device(256);
  const std::vector<uint8_t> src = Source(256, 1);
  ASSERT_OK(Put(dst, src, 256, stream_));
  EXPECT_EQ(Bytes(dst, 256), std::vector<uint8_t>(256, kSentinel));
  EXPECT_EQ(api_->counters().copies_run, 0u);
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(Bytes(dst, 256), src);
  EXPECT_EQ(api_->counters().copies_run, 1u);
  EXPECT_EQ(api_->counters().bytes_copied, 256u);
}

// EventDone answers false the first time it is asked about unfinished
// work, then runs the stream up to the event (and no further).
TEST_F(HostDeviceApiStreamsTest, EventDoneFalseThenTrueUpToTheEvent) {
  uint8_t* first = Device(64);
  uint8_t* second = Device(64);
  const std::vector<uint8_t> a = Source(64, 1), b = Source(64, 2);
  ASSERT_OK(Put(first, a, 64, stream_));
  const EventHandle e1 = api_->RecordEvent(stream_).ValueOrDie();
  ASSERT_OK(Put(second, b, 64, stream_));
  const EventHandle e2 = api_->RecordEvent(stream_).ValueOrDie();
  const std::vector<uint8_t> untouched(64, kSentinel);

  EXPECT_FALSE(api_->EventDone(e1).ValueOrDie());
  EXPECT_EQ(Bytes(first, 64), untouched);
  EXPECT_TRUE(api_->EventDone(e1).ValueOrDie());
  EXPECT_EQ(Bytes(first, 64), a);
  EXPECT_EQ(Bytes(second, 64), untouched);
  EXPECT_EQ(api_->counters().copies_run, 1u);

  EXPECT_FALSE(api_->EventDone(e2).ValueOrDie());
  EXPECT_EQ(Bytes(second, 64), untouched);
  EXPECT_TRUE(api_->EventDone(e2).ValueOrDie());
  EXPECT_EQ(Bytes(second, 64), b);
  EXPECT_TRUE(api_->EventDone(e1).ValueOrDie());

  // Recorded after all the work ran: done at the first question.
  const EventHandle e3 = api_->RecordEvent(stream_).ValueOrDie();
  EXPECT_TRUE(api_->EventDone(e3).ValueOrDie());
  ASSERT_OK(api_->DestroyEvent(e1));
  EXPECT_THAT(api_->EventDone(e1),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidResourceHandle: event 1 is not a "
                       "live event of this HostDeviceApi (never recorded, or "
                       "destroyed)"));
}

TEST_F(HostDeviceApiStreamsTest, SynchronizeFinishesEvents) {
  uint8_t* dst = Device(64);
  const std::vector<uint8_t> a = Source(64, 1);
  ASSERT_OK(Put(dst, a, 64, stream_));
  const EventHandle e = api_->RecordEvent(stream_).ValueOrDie();
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_TRUE(api_->EventDone(e).ValueOrDie());
  EXPECT_EQ(Bytes(dst, 64), a);
}

// Work of one stream runs in order: a copy reads what the one before it
// wrote, and of two writes of the same bytes the later stays.
TEST_F(HostDeviceApiStreamsTest, WorkRunsInOrder) {
  uint8_t* x = Device(128);
  uint8_t* y = Device(128);
  const std::vector<uint8_t> a = Source(128, 1), b = Source(128, 2);
  ASSERT_OK(Put(x, a, 128, stream_));
  ASSERT_OK(api_->Copy2DAsync(y, 128, x, 128, 128, 1, CopyKind::kDeviceToDevice,
                              stream_));
  ASSERT_OK(Put(x, b, 64, stream_));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(Bytes(y, 128), a);
  std::vector<uint8_t> want = a;
  std::memcpy(want.data(), b.data(), 64);
  EXPECT_EQ(Bytes(x, 128), want);
}

TEST_F(HostDeviceApiStreamsTest, StreamsAreIndependent) {
  const StreamHandle other = api_->CreateStream(0).ValueOrDie();
  uint8_t* x = Device(64);
  uint8_t* y = Device(64);
  const std::vector<uint8_t> a = Source(64, 1), b = Source(64, 2);
  ASSERT_OK(Put(x, a, 64, stream_));
  ASSERT_OK(Put(y, b, 64, other));
  ASSERT_OK(api_->SynchronizeStream(other));
  EXPECT_EQ(Bytes(y, 64), b);
  EXPECT_EQ(Bytes(x, 64), std::vector<uint8_t>(64, kSentinel));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(Bytes(x, 64), a);
}

// cudaStreamDestroy lets queued work complete; cudaFree waits for the
// device.
TEST_F(HostDeviceApiStreamsTest, DestroyStreamAndFreeRunQueuedWork) {
  uint8_t* x = Device(64);
  const std::vector<uint8_t> a = Source(64, 1);
  ASSERT_OK(Put(x, a, 64, stream_));
  const EventHandle e = api_->RecordEvent(stream_).ValueOrDie();
  ASSERT_OK(api_->DestroyStream(stream_));
  EXPECT_EQ(Bytes(x, 64), a);
  EXPECT_TRUE(api_->EventDone(e).ValueOrDie()) << "its stream is gone";

  const StreamHandle s = api_->CreateStream(0).ValueOrDie();
  std::vector<uint8_t> out(64, kSentinel);
  ASSERT_OK(api_->Copy2DAsync(out.data(), 64, x, 64, 64, 1,
                              CopyKind::kDeviceToHost, s));
  EXPECT_EQ(out, std::vector<uint8_t>(64, kSentinel));
  ASSERT_OK(api_->Free(x));
  EXPECT_EQ(out, a);
}

// Pinned host memory: host memory to Pointer() and the copy kinds,
// released only after the work that may touch it, and only once.
TEST_F(HostDeviceApiStreamsTest, PinnedHostMemory) {
  auto api = HostDeviceApi::Make({.devices = 1});
  const StreamHandle s = api->CreateStream(0).ValueOrDie();
  auto* pinned = static_cast<uint8_t*>(api->MallocHost(100).ValueOrDie());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned) % 4096, 0u);
  EXPECT_EQ(Bytes(pinned, 100), std::vector<uint8_t>(100, 0xDB));
  EXPECT_EQ(api->Pointer(pinned).ValueOrDie().device, -1);
  EXPECT_EQ(api->MallocHost(0).ValueOrDie(), nullptr);
  auto* dev = static_cast<uint8_t*>(api->Malloc(0, 100).ValueOrDie());
  const std::vector<uint8_t> a = Source(100, 3);
  std::memcpy(dev, a.data(), 100);
  ASSERT_OK(api->Copy2DAsync(pinned, 100, dev, 100, 100, 1,
                             CopyKind::kDeviceToHost, s));
  EXPECT_EQ(api->counters().bytes_copied, 0u);
  ASSERT_OK(api->FreeHost(pinned));  // runs the queued copy first
  EXPECT_EQ(api->counters().bytes_copied, 100u);
  EXPECT_OK(api->FreeHost(nullptr));
  const std::string refused =
      "cudaErrorInvalidValue: FreeHost: the pointer is not one that "
      "MallocHost of this HostDeviceApi returned (or it was freed)";
  EXPECT_THAT(api->FreeHost(pinned),
              StatusIs(StatusCode::kInvalidArgument, refused));
  EXPECT_THAT(api->FreeHost(dev),
              StatusIs(StatusCode::kInvalidArgument, refused));
  ASSERT_OK(api->Free(dev));
  const std::vector<std::string> calls = api->calls();
  const std::vector<std::string> want = {
      "MallocHost bytes=100",
      "MallocHost bytes=0",
      "Malloc device=0 bytes=100",
      "Copy2DAsync stream=1 kind=DeviceToHost width=100 height=1",
      "FreeHost bytes=100",
      "FreeHost null",
      "FreeHost refused: cudaErrorInvalidValue",
      "FreeHost refused: cudaErrorInvalidValue",
      "Free device=0 bytes=100"};
  EXPECT_EQ(std::vector<std::string>(calls.begin() + 1, calls.end()), want);
}

TEST_F(HostDeviceApiStreamsTest, CallLog) {
  auto api = HostDeviceApi::Make({.devices = 2});
  auto* dev = static_cast<uint8_t*>(api->Malloc(0, 64).ValueOrDie());
  std::vector<uint8_t> host(256, 1);
  const StreamHandle s = api->CreateStream(0).ValueOrDie();
  ASSERT_OK(api->Copy2DAsync(dev, 8, host.data(), 8, 8, 4,
                             CopyKind::kHostToDevice, s));
  Copy3D c;
  c.src = {dev, 4, 4, 4};
  c.dst = {host.data(), 16, 16, 4};
  c.extent = {8, 4, 2};
  c.kind = CopyKind::kDeviceToHost;
  EXPECT_THAT(api->Copy3DAsync(c, s),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: srcPos.x 0 + extent.width 8 "
                       "exceeds srcPtr.pitch 4"));
  c.src = {dev, 8, 8, 4};
  ASSERT_OK(api->Copy3DAsync(c, s));
  const EventHandle e = api->RecordEvent(s).ValueOrDie();
  EXPECT_FALSE(api->EventDone(e).ValueOrDie());
  EXPECT_TRUE(api->EventDone(e).ValueOrDie());
  EXPECT_TRUE(api->CanAccessPeer(0, 1).ValueOrDie());  // a query: no line
  GatherScatterArgs g;
  g.src = dev;
  g.dst = host.data() + 128;
  g.inner_bytes = 1;
  g.loops = 2;
  g.counts[0] = 3;
  g.counts[1] = 4;
  g.src_strides[0] = 4;
  g.src_strides[1] = 1;
  g.dst_strides[0] = 1;
  g.dst_strides[1] = 3;
  g.rows = 12;
  ASSERT_OK(api->LaunchGatherScatter(g, s));
  ASSERT_OK(api->SynchronizeStream(s));
  ASSERT_OK(api->DestroyEvent(e));
  ASSERT_OK(api->EnablePeerAccess(0, 1));
  EXPECT_THAT(api->EnablePeerAccess(0, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device 0 cannot enable peer "
                       "access to itself"));
  ASSERT_OK(api->DestroyStream(s));
  ASSERT_OK(api->Free(dev));
  EXPECT_THAT(api->CreateStream(5),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidDevice: device 5 is not one of the 2 "
                       "emulated devices"));
  const std::vector<std::string> want = {
      "Malloc device=0 bytes=64",
      "CreateStream device=0 -> stream=1",
      "Copy2DAsync stream=1 kind=HostToDevice width=8 height=4",
      "Copy3DAsync stream=1 kind=DeviceToHost extent=8x4x2 refused: "
      "cudaErrorInvalidValue",
      "Copy3DAsync stream=1 kind=DeviceToHost extent=8x4x2",
      "RecordEvent stream=1 -> event=1",
      "EventDone event=1 -> false",
      "EventDone event=1 -> true",
      "LaunchGatherScatter stream=1 rows=12 blocks=12",
      "Synchronize stream=1",
      "DestroyEvent event=1",
      "EnablePeerAccess device=0 peer=1",
      "EnablePeerAccess device=0 peer=0 refused: cudaErrorInvalidDevice",
      "DestroyStream stream=1",
      "Free device=0 bytes=64",
      "CreateStream device=5 refused: cudaErrorInvalidDevice",
  };
  EXPECT_EQ(api->calls(), want);
  const HostDeviceApiCounters n = api->counters();
  EXPECT_EQ(n.copies_run, 2u);
  EXPECT_EQ(n.bytes_copied, 32u + 64u);
  EXPECT_EQ(n.kernels_run, 1u);
  EXPECT_EQ(n.kernel_bytes, 12u);
}

// Several threads, each with its streams and memory, on one emulation.
TEST_F(HostDeviceApiStreamsTest, CallsFromSeveralThreads) {
  constexpr int kThreads = 4, kCopies = 16;
  std::vector<uint8_t*> dst(kThreads);
  std::vector<std::vector<uint8_t>> src(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    dst[t] = Device(kCopies * 64, t % 2);
    src[t] = Source(kCopies * 64, t + 1);
  }
  std::vector<Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Result<StreamHandle> s = api_->CreateStream(t % 2);
      if (!s.ok()) {
        results[t] = s.status();
        return;
      }
      for (int i = 0; i < kCopies && results[t].ok(); ++i) {
        results[t] =
            api_->Copy2DAsync(dst[t] + i * 64, 64, src[t].data() + i * 64, 64,
                              64, 1, CopyKind::kHostToDevice, *s);
      }
      if (results[t].ok()) results[t] = api_->SynchronizeStream(*s);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_OK(results[t]) << "thread " << t;
    EXPECT_EQ(Bytes(dst[t], kCopies * 64), src[t]) << "thread " << t;
  }
  EXPECT_EQ(api_->counters().copies_run, uint64_t{kThreads * kCopies});
}

// The gather/scatter kernel.

struct KernelCase {
  const char* name;
  uint64_t inner;
  std::vector<uint64_t> counts, src_strides, dst_strides;
  size_t src_offset = 0, dst_offset = 0;  // from 256-byte aligned memory
};

uint64_t SpanEnd(const KernelCase& k, const std::vector<uint64_t>& strides) {
  uint64_t end = k.inner;
  for (size_t i = 0; i < k.counts.size(); ++i) {
    end += (k.counts[i] - 1) * strides[i];
  }
  return end;
}

// `dst` after the kernel, by an odometer over the rows (the last loop
// fastest) independent of GatherScatterRowOffsets.
std::vector<uint8_t> ReferenceGatherScatter(const KernelCase& k,
                                            const uint8_t* src,
                                            std::vector<uint8_t> dst) {
  std::vector<uint64_t> index(k.counts.size(), 0);
  for (;;) {
    uint64_t s = k.src_offset, d = k.dst_offset;
    for (size_t i = 0; i < index.size(); ++i) {
      s += index[i] * k.src_strides[i];
      d += index[i] * k.dst_strides[i];
    }
    for (uint64_t b = 0; b < k.inner; ++b) dst[d + b] = src[s + b];
    size_t i = index.size();
    while (i > 0 && ++index[i - 1] == k.counts[i - 1]) index[--i] = 0;
    if (i == 0) return dst;
  }
}

void RunKernelCase(HostDeviceApi& api, StreamHandle stream, const KernelCase& k,
                   int dst_device) {
  SCOPED_TRACE(k.name);
  const size_t src_bytes = k.src_offset + SpanEnd(k, k.src_strides);
  const size_t dst_bytes = k.dst_offset + SpanEnd(k, k.dst_strides) + 32;
  auto* src = static_cast<uint8_t*>(api.Malloc(0, src_bytes).ValueOrDie());
  for (size_t i = 0; i < src_bytes; ++i) src[i] = Pattern(i, 3);
  std::vector<uint8_t> host_dst;
  uint8_t* dst = nullptr;
  if (dst_device >= 0) {
    dst = static_cast<uint8_t*>(api.Malloc(dst_device, dst_bytes).ValueOrDie());
  } else {
    host_dst.resize(dst_bytes + 256);
    dst = host_dst.data() +
          (256 - reinterpret_cast<uintptr_t>(host_dst.data()) % 256);
  }
  std::memset(dst, kSentinel, dst_bytes);
  GatherScatterArgs a;
  a.src = src + k.src_offset;
  a.dst = dst + k.dst_offset;
  a.inner_bytes = k.inner;
  a.loops = static_cast<uint32_t>(k.counts.size());
  a.rows = 1;
  for (size_t i = 0; i < k.counts.size(); ++i) {
    a.counts[i] = k.counts[i];
    a.src_strides[i] = k.src_strides[i];
    a.dst_strides[i] = k.dst_strides[i];
    a.rows *= k.counts[i];
  }
  const std::vector<uint8_t> before = Bytes(dst, dst_bytes);
  ASSERT_OK(api.LaunchGatherScatter(a, stream));
  EXPECT_EQ(Bytes(dst, dst_bytes), before) << "bytes before Synchronize";
  ASSERT_OK(api.SynchronizeStream(stream));
  EXPECT_EQ(Bytes(dst, dst_bytes), ReferenceGatherScatter(k, src, before));
  EXPECT_NE(Bytes(dst, dst_bytes), before);
}

TEST_F(HostDeviceApiStreamsTest, GatherScatterMatchesAReferenceLoop) {
  const std::vector<KernelCase> cases = {
      {"no loop", 40, {}, {}, {}},
      {"1 loop, unaligned", 13, {7}, {17}, {13}},
      {"1 loop, aligned", 24, {5}, {40}, {24}},
      {"1 loop, aligned length, unaligned source", 24, {5}, {40}, {24}, 3},
      {"2 loops, unaligned", 5, {3, 4}, {100, 7}, {20, 5}},
      {"2 loops, aligned, transposed", 16, {3, 4}, {256, 32}, {16, 48}},
      {"2 loops, aligned, offsets", 16, {3, 4}, {256, 32}, {64, 16}, 8, 24},
      {"4 loops, unaligned",
       3,
       {2, 3, 2, 2},
       {600, 150, 40, 9},
       {36, 12, 6, 3}},
      {"4 loops, aligned",
       8,
       {2, 2, 3, 2},
       {800, 320, 64, 16},
       {96, 48, 16, 8}},
      {"4 loops, rows over a block's threads",
       2056,
       {2, 1, 2, 1},
       {8192, 8, 2560, 0},
       {4112, 0, 2056, 0}},
  };
  for (const KernelCase& k : cases) {
    RunKernelCase(*api_, stream_, k, 0);
    RunKernelCase(*api_, stream_, k, -1);
  }
  EXPECT_EQ(api_->counters().kernels_run, 2 * cases.size());
}

// More rows than blocks: each block strides over the rows.
TEST_F(HostDeviceApiStreamsTest, GatherScatterMoreRowsThanBlocks) {
  RunKernelCase(*api_, stream_, {"70000 rows", 3, {70000}, {3}, {5}}, -1);
  EXPECT_EQ(api_->calls().back(), "Synchronize stream=1");
  const std::vector<std::string> calls = api_->calls();
  EXPECT_EQ(calls[calls.size() - 2],
            "LaunchGatherScatter stream=1 rows=70000 blocks=65535");
  EXPECT_EQ(api_->counters().kernel_bytes, 210000u);
}

TEST_F(HostDeviceApiStreamsTest, GatherScatterRefusals) {
  uint8_t* src = Device(256);
  for (size_t i = 0; i < 256; ++i) src[i] = Pattern(i, 5);
  uint8_t* dst = Device(100);
  uint8_t* far = Device(64, 1);
  auto refused = [&](auto edit, StatusCode code, const std::string& message) {
    GatherScatterArgs a;  // 4 rows of 16 bytes, 16 apart on both sides
    a.src = src;
    a.dst = dst;
    a.inner_bytes = 16;
    a.loops = 1;
    a.counts[0] = 4;
    a.src_strides[0] = 16;
    a.dst_strides[0] = 16;
    a.rows = 4;
    edit(a);
    EXPECT_THAT(api_->LaunchGatherScatter(a, stream_), StatusIs(code, message));
  };
  const StatusCode invalid = StatusCode::kInvalidArgument;
  refused([](GatherScatterArgs& a) { a.loops = 9; }, invalid,
          "cudaErrorInvalidValue: loops 9 exceeds kMaxLoops 8");
  refused([](GatherScatterArgs& a) { a.rows = 5; }, invalid,
          "cudaErrorInvalidValue: rows 5 is not the product of the counts, "
          "4");
  refused(
      [](GatherScatterArgs& a) {
        a.loops = 2;
        a.counts[0] = a.counts[1] = uint64_t{1} << 32;
      },
      invalid,
      "cudaErrorInvalidValue: the product of the counts overflows uint64");
  refused([](GatherScatterArgs& a) { a.src = nullptr; }, invalid,
          "cudaErrorInvalidValue: src is null");
  refused([](GatherScatterArgs& a) { a.dst = nullptr; }, invalid,
          "cudaErrorInvalidValue: dst is null");
  refused([](GatherScatterArgs& a) { a.src_strides[0] = uint64_t{1} << 63; },
          invalid,
          "cudaErrorInvalidValue: (counts[0] 4 - 1) * src_strides[0] "
          "9223372036854775808 overflows uint64");
  refused(
      [](GatherScatterArgs& a) {
        a.loops = 2;
        a.counts[0] = a.counts[1] = 2;
        a.dst_strides[0] = a.dst_strides[1] = uint64_t{1} << 63;
      },
      invalid,
      "cudaErrorInvalidValue: the offset of the end of dst's last row "
      "overflows uint64");
  refused(
      [](GatherScatterArgs& a) {
        a.counts[0] = a.rows = 2;
        a.src_strides[0] = UINT64_MAX - 63;
      },
      invalid,
      "cudaErrorInvalidValue: src + 18446744073709551568 (the end of its "
      "last row) overflows the address space");
  refused([](GatherScatterArgs& a) { a.dst_strides[0] = 32; }, invalid,
          "cudaErrorInvalidValue: the kernel's rows reach 112 bytes past "
          "dst, beyond the end of its allocation on device 0 (100 bytes past "
          "dst)");
  refused(
      [](GatherScatterArgs& a) {
        a.inner_bytes = 17;
        a.dst_strides[0] = 28;
      },
      invalid,
      "cudaErrorInvalidValue: the kernel's rows reach 101 bytes past dst, "
      "beyond the end of its allocation on device 0 (100 bytes past dst)");
  refused([&](GatherScatterArgs& a) { a.dst = far; },
          StatusCode::kFailedPrecondition,
          "cudaErrorPeerAccessNotEnabled: stream 1 of device 0 runs the "
          "gather/scatter kernel on dst, memory of device 1, without peer "
          "access from device 0 to device 1");
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(api_->counters().kernels_run, 0u) << "a refusal queues nothing";

  // Rows that end exactly at the end of the allocation.
  GatherScatterArgs fits;
  fits.src = src;
  fits.dst = dst;
  fits.inner_bytes = 16;
  fits.loops = 1;
  fits.counts[0] = fits.rows = 4;
  fits.src_strides[0] = 16;
  fits.dst_strides[0] = 28;
  ASSERT_OK(api_->LaunchGatherScatter(fits, stream_));

  // No rows: nothing is touched, so no pointer is needed; the launch runs.
  GatherScatterArgs none;
  none.loops = 1;
  none.rows = 0;
  ASSERT_OK(api_->LaunchGatherScatter(none, stream_));
  ASSERT_OK(api_->EnablePeerAccess(0, 1));
  GatherScatterArgs to_far;
  to_far.src = src;
  to_far.dst = far;
  to_far.inner_bytes = 64;
  ASSERT_OK(api_->LaunchGatherScatter(to_far, stream_));
  ASSERT_OK(api_->SynchronizeStream(stream_));
  EXPECT_EQ(api_->counters().kernels_run, 3u);
  EXPECT_EQ(api_->counters().kernel_bytes, 128u);
  std::vector<uint8_t> want_dst(100, kSentinel);
  for (size_t row = 0; row < 4; ++row) {
    for (size_t b = 0; b < 16; ++b) {
      want_dst[row * 28 + b] = Pattern(row * 16 + b, 5);
    }
  }
  EXPECT_EQ(Bytes(dst, 100), want_dst);
  std::vector<uint8_t> want(64);
  for (size_t i = 0; i < 64; ++i) want[i] = Pattern(i, 5);
  EXPECT_EQ(Bytes(far, 64), want);
}

}  // namespace
}  // namespace reshard::cuda
