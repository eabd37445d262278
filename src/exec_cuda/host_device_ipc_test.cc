// HostDeviceApi's CUDA IPC between real processes: memory exported here
// is opened, read, written and copied in a child process with a
// HostDeviceApi of its own, and every refusal the runtime documents comes
// with its exact message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "testing/children.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::InChild;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::StatusIs;

std::unique_ptr<HostDeviceApi> Shareable(int devices = 1) {
  return HostDeviceApi::Make({.devices = devices, .ipc_shareable = true});
}

std::string Text(const Status& st) { return st.ToString(); }

TEST(HostDeviceIpcTest, AnotherProcessReadsAndWritesTheExportedMemory) {
  auto api = Shareable();
  auto* p = static_cast<uint8_t*>(Must(api->Malloc(0, 5000)));
  for (size_t i = 0; i < 5000; ++i) p[i] = static_cast<uint8_t>(i * 7);
  const IpcMemHandle handle = Must(api->IpcGetMemHandle(p));
  const std::string out = InChild([&] {
    auto mine = Shareable(2);
    auto* q = static_cast<uint8_t*>(Must(mine->IpcOpenMemHandle(1, handle)));
    std::string r = std::to_string(Must(mine->Pointer(q + 4999)).device);
    r += std::memcmp(q, p, 5000) == 0 ? " same" : " differ";
    // A device-to-device copy on this process's stream out of the mapping.
    auto* own = static_cast<uint8_t*>(Must(mine->Malloc(1, 64)));
    const StreamHandle s = Must(mine->CreateStream(1));
    MustOk(mine->Copy2DAsync(own, 16, q + 100, 50, 16, 4,
                             CopyKind::kDeviceToDevice, s));
    MustOk(mine->SynchronizeStream(s));
    for (int row = 0; row < 4; ++row) {
      r += " " + std::to_string(own[row * 16 + 3]);
    }
    q[0] = 0xAB;  // the exporter sees it
    MustOk(mine->IpcCloseMemHandle(q));
    for (const auto& line : mine->calls()) {
      if (line.rfind("Ipc", 0) == 0) r += " | " + line;
    }
    return r;
  });
  EXPECT_EQ(out,
            "1 same 209 47 141 235 | IpcOpenMemHandle device=1 bytes=5000 -> "
            "refs=1 | IpcCloseMemHandle bytes=5000 -> refs=0");
  EXPECT_EQ(p[0], 0xAB);
  EXPECT_EQ(api->calls()[1], "IpcGetMemHandle device=0 bytes=5000");
  MustOk(api->Free(p));
}

TEST(HostDeviceIpcTest,
     OpeningTwiceCountsReferencesAndClosingUnopenedIsRefused) {
  auto api = Shareable();
  void* p = Must(api->Malloc(0, 256));
  const IpcMemHandle handle = Must(api->IpcGetMemHandle(p));
  const std::string out = InChild([&] {
    auto mine = Shareable();
    void* a = Must(mine->IpcOpenMemHandle(0, handle));
    void* b = Must(mine->IpcOpenMemHandle(0, handle));
    std::string r = a == b ? "same pointer" : "two pointers";
    r += " | " + Text(mine->Free(a));
    r += " | " + Text(mine->IpcCloseMemHandle(static_cast<char*>(a) + 1));
    MustOk(mine->IpcCloseMemHandle(a));
    MustOk(mine->IpcCloseMemHandle(a));
    r += " | " + Text(mine->IpcCloseMemHandle(a));
    r += " | " + std::to_string(Must(mine->Pointer(a)).device);
    return r;
  });
  EXPECT_EQ(out,
            "same pointer | InvalidArgument: cudaErrorInvalidValue: Free: "
            "IpcOpenMemHandle mapped the pointer (IpcCloseMemHandle closes it) "
            "| InvalidArgument: cudaErrorInvalidValue: IpcCloseMemHandle: the "
            "pointer is not one that IpcOpenMemHandle returned (or it was "
            "closed) | InvalidArgument: cudaErrorInvalidValue: "
            "IpcCloseMemHandle: the pointer is not one that IpcOpenMemHandle "
            "returned (or it was closed) | -1");
  MustOk(api->Free(p));
}

TEST(HostDeviceIpcTest, TheExportingProcessCannotOpenItsOwnHandle) {
  auto api = Shareable();
  void* p = Must(api->Malloc(0, 256));
  const IpcMemHandle handle = Must(api->IpcGetMemHandle(p));
  EXPECT_THAT(api->IpcOpenMemHandle(0, handle),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorDeviceUninitialized: IpcOpenMemHandle: the "
                       "handle was exported by this process, which cannot "
                       "open it"));
  EXPECT_EQ(api->calls().back(),
            "IpcOpenMemHandle device=0 bytes=256 refused: "
            "cudaErrorDeviceUninitialized");
  MustOk(api->Free(p));
}

TEST(HostDeviceIpcTest, GarbageAndStaleHandlesAreRefused) {
  auto api = Shareable();
  void* p = Must(api->Malloc(0, 256));
  const IpcMemHandle stale = Must(api->IpcGetMemHandle(p));
  MustOk(api->Free(p));
  IpcMemHandle garbage;
  std::memset(garbage.bytes, 0x5A, sizeof garbage.bytes);
  const std::string out = InChild([&] {
    auto mine = Shareable();
    return Text(mine->IpcOpenMemHandle(0, garbage).status()) + "\n" +
           Text(mine->IpcOpenMemHandle(0, stale).status()) + "\n" +
           Text(mine->IpcOpenMemHandle(3, stale).status());
  });
  const size_t first = out.find('\n'), second = out.rfind('\n');
  ASSERT_NE(first, second) << out;
  EXPECT_EQ(out.substr(0, first),
            "InvalidArgument: cudaErrorInvalidValue: IpcOpenMemHandle: the "
            "handle is not one that IpcGetMemHandle made");
  // The memfd's name ends in the allocation's serial number.
  EXPECT_THAT(
      out.substr(first + 1, second - first - 1),
      ::testing::MatchesRegex(
          "InvalidArgument: cudaErrorInvalidResourceHandle: IpcOpenMemHandle: "
          "the allocation of process " +
          std::to_string(::getpid()) +
          " that the handle names \\(reshard-emulated-" +
          std::to_string(::getpid()) +
          "-[0-9]+\\) is no longer exported \\(freed, or its process "
          "exited\\)"));
  EXPECT_EQ(out.substr(second + 1),
            "InvalidArgument: cudaErrorInvalidDevice: device 3 is not one of "
            "the 1 emulated devices");
}

TEST(HostDeviceIpcTest, ExportTakesTheBaseOfAShareableAllocation) {
  auto api = Shareable();
  auto* p = static_cast<uint8_t*>(Must(api->Malloc(0, 1024)));
  EXPECT_THAT(api->IpcGetMemHandle(p + 8),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: IpcGetMemHandle: the pointer "
                       "lies 8 bytes into an allocation, not at its base"));
  std::vector<uint8_t> host(16);
  EXPECT_THAT(api->IpcGetMemHandle(host.data()),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: IpcGetMemHandle: the pointer is "
                       "not a device allocation of this HostDeviceApi"));
  const AllocationRange range = Must(api->AllocationOf(p + 1000));
  EXPECT_EQ(range.base, p);
  EXPECT_EQ(range.bytes, 1024u);
  EXPECT_THAT(api->AllocationOf(host.data()),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorInvalidValue: AllocationOf: the pointer lies "
                       "in no device allocation of this HostDeviceApi"));
  MustOk(api->Free(p));
  auto private_memory = HostDeviceApi::Make({});
  void* q = Must(private_memory->Malloc(0, 64));
  EXPECT_THAT(private_memory->IpcGetMemHandle(q),
              StatusIs(StatusCode::kInvalidArgument,
                       "cudaErrorNotSupported: IpcGetMemHandle: this "
                       "HostDeviceApi was made without ipc_shareable (its "
                       "allocations are private memory)"));
  MustOk(private_memory->Free(q));
}

}  // namespace
}  // namespace reshard::cuda
