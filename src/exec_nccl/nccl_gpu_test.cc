// The NCCL exchange over the NCCL library and CUDA device memory: two
// ranks on threads, rank 0's sources on device 0, rank 1's targets on
// device 1 (NCCL takes one device per rank of a communicator), strided on
// both sides (packed and unpacked on the devices), one message per region
// and then all regions coalesced into one; every target byte checked.
// Skipped without CUDA, NCCL or two devices. And the seam alone on one
// device: a communicator of one rank sending to itself.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "exec_nccl/nccl_api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/device_sides.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::nccl {
namespace {

using ::reshard::testing::Must;
using Kind = ExchangeOp::Kind;

// Every fragment of `host` to or from its device copy in `device`.
void CopyAll(cuda::DeviceApi& api, const WeightPlacementManifest& m,
             internal::HostBuffers& host, testing::DeviceSide& device,
             bool to_device, int ordinal) {
  const cuda::StreamHandle stream = Must(api.CreateStream(ordinal));
  for (const auto& [id, p] : device.data) {
    const size_t n = m.FindFragment(id)->nbytes();
    uint8_t* h = host.data.at(id);
    ASSERT_OK(to_device
                  ? api.Copy2DAsync(p, n, h, n, n, 1,
                                    cuda::CopyKind::kHostToDevice, stream)
                  : api.Copy2DAsync(h, n, p, n, n, 1,
                                    cuda::CopyKind::kDeviceToHost, stream));
  }
  ASSERT_OK(api.SynchronizeStream(stream));
  ASSERT_OK(api.DestroyStream(stream));
}

// The library behind the seam on device 0: non-blocking initialisation of
// a one-rank communicator, a group of a send to itself and the receive,
// completion on the stream, every byte.
TEST(NcclGpuTest, OneRankSendsToItselfThroughTheLibrary) {
  const CudaInfo info = QueryCuda();
  if (!info.built) GTEST_SKIP() << "this build has no CUDA";
  if (!NcclLibraryBuilt()) GTEST_SKIP() << "this build has no NCCL";
  if (info.devices < 1) GTEST_SKIP() << "no CUDA device here";
  std::shared_ptr<cuda::DeviceApi> device = Must(cuda::RuntimeDeviceApi());
  std::unique_ptr<NcclApi> nccl = Must(MakeNcclLibraryApi());
  const NcclUniqueId id = Must(nccl->GetUniqueId());
  const CommHandle comm = Must(nccl->CommInitRank(1, id, 0, 0));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Must(nccl->CommGetAsyncError(comm)) == AsyncState::kInProgress) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "init";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> host(kBytes), back(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 7);
  const cuda::StreamHandle stream = Must(device->CreateStream(0));
  void* a = Must(device->Malloc(0, kBytes));
  void* b = Must(device->Malloc(0, kBytes));
  ASSERT_OK(device->Copy2DAsync(a, kBytes, host.data(), kBytes, kBytes, 1,
                                cuda::CopyKind::kHostToDevice, stream));
  ASSERT_OK(nccl->GroupStart());
  ASSERT_OK(nccl->Send(a, kBytes, NcclDataType::kUint8, 0, comm, stream));
  ASSERT_OK(nccl->Recv(b, kBytes / 4, NcclDataType::kUint32, 0, comm, stream));
  ASSERT_OK(nccl->GroupEnd());
  while (Must(nccl->CommGetAsyncError(comm)) == AsyncState::kInProgress) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "group";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_OK(device->SynchronizeStream(stream));
  ASSERT_OK(device->Copy2DAsync(back.data(), kBytes, b, kBytes, kBytes, 1,
                                cuda::CopyKind::kDeviceToHost, stream));
  ASSERT_OK(device->SynchronizeStream(stream));
  EXPECT_TRUE(back == host);
  EXPECT_OK(nccl->CommDestroy(comm));
  EXPECT_OK(device->Free(a));
  EXPECT_OK(device->Free(b));
  EXPECT_OK(device->DestroyStream(stream));
}

TEST(NcclGpuTest, StridedRegionsMoveBetweenTwoDevices) {
  const CudaInfo info = QueryCuda();
  if (!info.built) GTEST_SKIP() << "this build has no CUDA";
  if (!NcclLibraryBuilt()) GTEST_SKIP() << "this build has no NCCL";
  if (info.devices < 2) GTEST_SKIP() << "needs two CUDA devices";
  std::shared_ptr<cuda::DeviceApi> api = Must(cuda::RuntimeDeviceApi());
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  auto host_src = Must(internal::AllocateHostBuffers(source, "host-source"));
  auto host_dst = Must(internal::AllocateHostBuffers(target, "host-target"));
  internal::FillPattern(source, tensors, host_src);
  testing::DeviceSide src(*api, source, 0, "nccl-source");
  testing::DeviceSide dst(*api, target, 1, "nccl-target");
  CopyAll(*api, source, host_src, src, true, 0);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto bound = Must(BoundTransferPlan::Bind(plan, source, src.bindings,
                                                  target, dst.bindings));
  auto zero = Must(
      MakePeerExchange("nccl", {0, PeerExchangeOptions().Set("device", "0")}));
  auto one = Must(
      MakePeerExchange("nccl", {1, PeerExchangeOptions().Set("device", "1")}));
  ExchangeRunOptions o;
  o.session_tag = 1;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  ExchangeOp all_send{&bound.regions()[0], {}, 1, Kind::kSend};
  ExchangeOp all_receive{&bound.regions()[0], {}, 0, Kind::kReceive};
  std::vector<ExchangeOp> sends, receives;
  for (size_t i = 0; i < bound.regions().size(); ++i) {
    sends.push_back({&bound.regions()[i], {}, 1, Kind::kSend});
    receives.push_back({&bound.regions()[i], {}, 0, Kind::kReceive});
    if (i > 0) all_send.more.push_back(&bound.regions()[i]);
    if (i > 0) all_receive.more.push_back(&bound.regions()[i]);
  }
  const std::string zero_at = Must(zero->Address());
  const std::string one_at = Must(one->Address());
  Status zero_status;
  std::thread t([&] {
    zero_status = zero->Connect(1, one_at, "rank 1");
    if (zero_status.ok()) zero_status = zero->WireUp(o.deadline, nullptr);
    if (zero_status.ok()) zero_status = zero->Run(sends, o, nullptr);
    if (zero_status.ok()) zero_status = zero->Run({all_send}, o, nullptr);
  });
  Status one_status = one->Connect(0, zero_at, "rank 0");
  if (one_status.ok()) one_status = one->WireUp(o.deadline, nullptr);
  if (one_status.ok()) one_status = one->Run(receives, o, nullptr);
  CopyAll(*api, target, host_dst, dst, false, 1);
  EXPECT_EQ(internal::VerifyPattern(target, tensors, host_dst), "");
  for (const auto& [id, p] : host_dst.data) {
    std::memset(p, 0, target.FindFragment(id)->nbytes());
  }
  CopyAll(*api, target, host_dst, dst, true, 1);
  if (one_status.ok()) one_status = one->Run({all_receive}, o, nullptr);
  t.join();
  ASSERT_OK(zero_status);
  ASSERT_OK(one_status);
  CopyAll(*api, target, host_dst, dst, false, 1);
  EXPECT_EQ(internal::VerifyPattern(target, tensors, host_dst), "");
}

}  // namespace
}  // namespace reshard::nccl
