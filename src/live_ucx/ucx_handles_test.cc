// Bytes from other processes are checked before UCX parses them: UCX
// asserts (aborting the process) on a malformed worker address or key.

#include "live_ucx/ucx_handles.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

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
  EXPECT_OK(CheckPackedRemoteKey(shm));
  EXPECT_OK(CheckPackedRemoteKey(tcp));
  EXPECT_EQ(CheckPackedRemoteKey(std::string(64, '\x02')).message(),
            "packed UCX remote key of 64 bytes: memory type 2 is not host "
            "memory");
  EXPECT_EQ(CheckPackedRemoteKey(std::string(9, '\0')).message(),
            "packed UCX remote key of 9 bytes: no memory domain");
  EXPECT_EQ(CheckPackedRemoteKey("\x01").message(),
            "packed UCX remote key of 1 bytes: too short");
  EXPECT_EQ(CheckPackedRemoteKey(std::string("\x01\0\0\0\0\0\0\0\0\x05", 10))
                .message(),
            "packed UCX remote key of 10 bytes: keys run past the end");
  EXPECT_EQ(
      CheckPackedRemoteKey(std::string("\xff\0\0\0\0\0\0\0\0", 9)).message(),
      "packed UCX remote key of 9 bytes: keys run past the end");
}

}  // namespace
}  // namespace reshard::internal
