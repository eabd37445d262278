// Bytes from other processes are checked before UCX parses them: UCX
// asserts (aborting the process) on a malformed worker address or key.

#include "live_ucx/ucx_handles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "live_ucx/ucx_exchange.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

TEST(UcxHandlesTest, WorkerAddressesAreCheckedBeforeUcx) {
  // Well-formed records of bytes UCX did not write.
  const std::string own("\x20\x45\x5c\x97\x1d\x74\x4d\x22\xf2\x20\x00", 11);
  EXPECT_OK(CheckWorkerAddress(own, own));
  EXPECT_EQ(CheckWorkerAddress(std::string(64, '\x02'), own).message(),
            "UCX worker address has format version 2, this UCX writes "
            "version 0");
  EXPECT_EQ(CheckWorkerAddress("\x20\x01", own).message(),
            "UCX worker address of 2 bytes is too short");
}

TEST(UcxHandlesTest, RemoteKeysAreCheckedBeforeUcx) {
  // Packed as UCX 1.13 packs them: md map, memory type, one sized key per
  // memory domain.
  const std::string shm("\x13\0\0\0\0\0\0\0\0\0\0\0", 12);
  const std::string tcp("\x01\0\0\0\0\0\0\0\0\0", 10);
  EXPECT_OK(CheckPackedRemoteKey(shm, false));
  EXPECT_OK(CheckPackedRemoteKey(tcp, false));
  EXPECT_EQ(CheckPackedRemoteKey(std::string(64, '\x02'), false).message(),
            "packed UCX remote key of 64 bytes: memory type 2 is not host "
            "memory");
  EXPECT_EQ(CheckPackedRemoteKey(std::string(9, '\0'), false).message(),
            "packed UCX remote key of 9 bytes: no memory domain");
  EXPECT_EQ(CheckPackedRemoteKey("\x01", false).message(),
            "packed UCX remote key of 1 bytes: too short");
  EXPECT_EQ(
      CheckPackedRemoteKey(std::string("\x01\0\0\0\0\0\0\0\0\x05", 10), false)
          .message(),
      "packed UCX remote key of 10 bytes: keys run past the end");
  EXPECT_EQ(CheckPackedRemoteKey(std::string("\xff\0\0\0\0\0\0\0\0", 9), false)
                .message(),
            "packed UCX remote key of 9 bytes: keys run past the end");
}

// A key whose memory-type byte (after the 8-byte md map) is CUDA (1) or
// CUDA managed (2) is accepted only by an exchange that declared CUDA
// memory; ROCm (3) never.
TEST(UcxHandlesTest, CudaRemoteKeysOnlyWhereCudaIsDeclared) {
  const std::string cuda("\x01\0\0\0\0\0\0\0\x01\x02\xaa\xbb", 12);
  const std::string managed("\x01\0\0\0\0\0\0\0\x02\0", 10);
  const std::string rocm("\x01\0\0\0\0\0\0\0\x03\0", 10);
  EXPECT_OK(CheckPackedRemoteKey(cuda, true));
  EXPECT_OK(CheckPackedRemoteKey(managed, true));
  EXPECT_EQ(CheckPackedRemoteKey(cuda, false).message(),
            "packed UCX remote key of 12 bytes: memory type 1 is not host "
            "memory");
  EXPECT_EQ(CheckPackedRemoteKey(managed, false).message(),
            "packed UCX remote key of 10 bytes: memory type 2 is not host "
            "memory");
  EXPECT_EQ(CheckPackedRemoteKey(rocm, true).message(),
            "packed UCX remote key of 10 bytes: memory type 3 is not host or "
            "CUDA memory");
  // Declaring CUDA relaxes the memory type only.
  EXPECT_EQ(
      CheckPackedRemoteKey(std::string("\x01\0\0\0\0\0\0\0\x01\x05", 10), true)
          .message(),
      "packed UCX remote key of 10 bytes: keys run past the end");
}

// Every memory-type mask UCX may report against every "memory" setting.
TEST(UcxHandlesTest, MemoryKindsFromUcxMemoryTypesAndTheSetting) {
  using K = std::vector<MemoryKind>;
  const K host{MemoryKind::kHost};
  const K both{MemoryKind::kHost, MemoryKind::kCuda};
  const uint64_t h = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  const uint64_t c = UCS_BIT(UCS_MEMORY_TYPE_CUDA);
  const uint64_t m = UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
  const uint64_t r = UCS_BIT(UCS_MEMORY_TYPE_ROCM);
  const std::string refused =
      "peer exchange \"ucx\": setting memory=\"cuda\", but this UCX has no "
      "CUDA support (its context reports no CUDA memory type)";
  for (uint64_t types : {h, h | r, h | m, uint64_t{0}}) {
    EXPECT_EQ(Must(UcxMemoryKinds(types, UcxMemorySetting::kAuto)), host);
    EXPECT_EQ(Must(UcxMemoryKinds(types, UcxMemorySetting::kHost)), host);
    EXPECT_THAT(UcxMemoryKinds(types, UcxMemorySetting::kCuda),
                StatusIs(StatusCode::kFailedPrecondition, refused));
  }
  for (uint64_t types : {h | c, h | c | m, h | c | m | r, c}) {
    EXPECT_EQ(Must(UcxMemoryKinds(types, UcxMemorySetting::kAuto)), both);
    EXPECT_EQ(Must(UcxMemoryKinds(types, UcxMemorySetting::kHost)), host);
    EXPECT_EQ(Must(UcxMemoryKinds(types, UcxMemorySetting::kCuda)), both);
  }
}

// This machine's UCX detects host memory as host memory, and a packed
// (strided) message of host memory passes the check an exchange that
// declared CUDA memory makes before Run; the refusal of device memory
// needs a UCX with CUDA support (not here).
TEST(UcxHandlesTest, PackedMessagesOfHostMemoryPassTheDeviceCheck) {
  const UcxContext context = Must(UcxContext::Make(UcxOptions{}));
  std::vector<uint8_t> source(8192), target(8192);
  EXPECT_EQ(Must(DetectMemoryType(context, source.data())),
            UCS_MEMORY_TYPE_HOST);
  const auto from = reinterpret_cast<uint64_t>(source.data());
  const auto to = reinterpret_cast<uint64_t>(target.data());
  // 16 rows of 256 bytes, 512 apart at the source, packed at the target.
  const BoundRegion strided{from, to, 256, {{16, 512, 256}}, 4096, 3};
  const std::vector<ExchangeOp> ops = {
      {&strided, {}, 1, ExchangeOp::Kind::kSend},
      {&strided, {}, 1, ExchangeOp::Kind::kReceive}};
  EXPECT_OK(RefusePackedDeviceMemory(context, {}, ops));
}

}  // namespace
}  // namespace reshard::internal
