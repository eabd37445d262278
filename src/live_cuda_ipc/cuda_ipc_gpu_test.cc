// Needs a CUDA device (ctest label `gpu`; skipped without one): the
// "cuda-ipc" exchange, made by name over the CUDA runtime, between two
// processes on device 0. One registers cudaMalloc'd memory holding a
// pattern, the other imports its key and reads a contiguous and a strided
// region into its own device memory, which is copied back and checked
// byte for byte; the handle is closed at Disconnect.
//
// CUDA does not survive fork: both processes are children forked before
// either touches CUDA, and this process never does (the device count is
// asked in a child too). They pass the address and key through a pipe.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/sdk/peer_exchange.h"
#include "testing/children.h"
#include "testing/must.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::InChild;
using ::reshard::testing::InChildren;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::ReadMessage;
using ::reshard::testing::WriteMessage;

constexpr size_t kBytes = size_t{1} << 20;

uint8_t Pattern(size_t i) { return static_cast<uint8_t>(i * 29 + (i >> 9)); }

// Rank 0: the pattern in device memory, registered; waits for rank 1.
std::string Exporter(int to_one, int from_one) {
  std::shared_ptr<cuda::DeviceApi> api = Must(cuda::RuntimeDeviceApi());
  void* p = Must(api->Malloc(0, kBytes));
  std::vector<uint8_t> host(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host[i] = Pattern(i);
  const cuda::StreamHandle s = Must(api->CreateStream(0));
  MustOk(api->Copy2DAsync(p, kBytes, host.data(), kBytes, kBytes, 1,
                          cuda::CopyKind::kHostToDevice, s));
  MustOk(api->SynchronizeStream(s));
  auto zero = Must(MakePeerExchange("cuda-ipc", {0, {}}));
  WriteMessage(to_one, Must(zero->Address()));
  WriteMessage(to_one, Must(zero->RegisterMemory(static_cast<char*>(p) + 4096,
                                                 kBytes - 4096)));
  WriteMessage(to_one, std::to_string(reinterpret_cast<uint64_t>(p)));
  const std::string done = ReadMessage(from_one);
  MustOk(api->Free(p));
  return done;
}

// Rank 1: reads two regions of rank 0's memory into its own.
std::string Importer(int from_zero, int to_zero) {
  const std::string address = ReadMessage(from_zero);
  const std::string packed = ReadMessage(from_zero);
  const uint64_t base = std::stoull(ReadMessage(from_zero));
  std::shared_ptr<cuda::DeviceApi> api = Must(cuda::RuntimeDeviceApi());
  auto* dst = static_cast<uint8_t*>(Must(api->Malloc(0, 8192)));
  auto one = Must(MakePeerExchange("cuda-ipc", {1, {}}));
  MustOk(one->Connect(0, address, "rank 0"));
  const uint64_t key = Must(one->ImportRemoteKey(0, packed));
  const auto at = reinterpret_cast<uint64_t>(dst);
  std::vector<BoundRegion> regions = {
      {base + 5000, at, 4096, {}, 4096, 0},
      {base + 100000, at + 4096, 256, {{16, 4096, 256}}, 4096, 1}};
  std::vector<ExchangeOp> ops;
  for (const BoundRegion& r : regions) {
    ops.push_back({&r, {}, 0, ExchangeOp::Kind::kGet, key});
  }
  ExchangeRunOptions o;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string out = one->Run(ops, o, nullptr).ToString();
  std::vector<uint8_t> host(8192);
  const cuda::StreamHandle s = Must(api->CreateStream(0));
  MustOk(api->Copy2DAsync(host.data(), 8192, dst, 8192, 8192, 1,
                          cuda::CopyKind::kDeviceToHost, s));
  MustOk(api->SynchronizeStream(s));
  bool exact = true;
  for (size_t i = 0; i < 4096; ++i) exact &= host[i] == Pattern(5000 + i);
  for (size_t i = 0; i < 4096; ++i) {
    exact &= host[4096 + i] == Pattern(100000 + i / 256 * 4096 + i % 256);
  }
  out += exact ? " exact" : " WRONG";
  out += " " + one->Disconnect(0).ToString();
  MustOk(api->Free(dst));
  WriteMessage(to_zero, "done");
  return out;
}

TEST(CudaIpcGpuTest, ReadsAnotherProcesssDeviceMemory) {
  const std::string cuda = InChild([] {
    const CudaInfo info = QueryCuda();
    return info.built ? std::to_string(info.devices) : "not built";
  });
  if (cuda == "not built") GTEST_SKIP() << "this build has no CUDA";
  if (cuda == "0" || cuda.empty()) GTEST_SKIP() << "no CUDA device here";
  int zero_to_one[2], one_to_zero[2];
  ASSERT_EQ(::pipe(zero_to_one), 0);
  ASSERT_EQ(::pipe(one_to_zero), 0);
  const std::vector<std::string> out = InChildren(2, [&](uint32_t r) {
    return r == 0 ? Exporter(zero_to_one[1], one_to_zero[0])
                  : Importer(zero_to_one[0], one_to_zero[1]);
  });
  EXPECT_EQ(out[0], "done");
  EXPECT_EQ(out[1], "OK exact OK");
}

}  // namespace
}  // namespace reshard::internal
