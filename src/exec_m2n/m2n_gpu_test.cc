// Tests that need a CUDA device and the NCCL M2N plugin (ctest label gpu;
// skipped without them): lowered tensors moved by ncclReshard over a
// one-rank communicator (the self-copy nccl_m2n.h keeps for API-contract
// testing), two tensors in one group, every byte compared on the host.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_lowering.h"
#include "reshard/backends/cuda_transport.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::m2n {
namespace {

using ::reshard::testing::Must;

#define REQUIRE_M2N_DEVICE()                                       \
  do {                                                             \
    if (!M2nBuilt()) GTEST_SKIP() << "this build has no NCCL M2N"; \
    const CudaInfo info = QueryCuda();                             \
    if (!info.built) GTEST_SKIP() << "this build has no CUDA";     \
    if (info.devices == 0) GTEST_SKIP() << "no CUDA device here";  \
  } while (0)

// A one-rank lowering of a tensor of `shape`: the whole tensor on rank 0
// on both sides.
M2nTensor SelfCopy(const char* id, const Dims& shape, M2nDtype dtype) {
  M2nTensorInput in{id,
                    shape,
                    "float32",
                    "float32",
                    {{0, Dims(shape.size(), 0), shape}},
                    {{0, Dims(shape.size(), 0), shape}},
                    1};
  M2nDecision d = LowerTensorToM2n(in);
  EXPECT_TRUE(d.m2n.has_value()) << d.reason;
  d.m2n->dtype = dtype;
  return *d.m2n;
}

TEST(M2nGpuTest, GroupOfTwoSelfCopiesMovesEveryByte) {
  REQUIRE_M2N_DEVICE();
  std::shared_ptr<cuda::DeviceApi> api = Must(cuda::RuntimeDeviceApi());
  std::unique_ptr<M2nBackend> m2n = Must(M2nBackend::MakeSingleRank(0));
  const std::vector<M2nTensor> tensors = {
      SelfCopy("a", Dims{4, 8}, M2nDtype::kFloat32),
      SelfCopy("b", Dims{3, 5, 7}, M2nDtype::kFloat32)};
  const size_t sizes[] = {4 * 8 * 4, 3 * 5 * 7 * 4};
  const cuda::StreamHandle stream = Must(api->CreateStream(0));
  std::vector<M2nBuffers> buffers;
  std::vector<std::vector<uint8_t>> hosts;
  for (size_t t = 0; t < 2; ++t) {
    std::vector<uint8_t> host(sizes[t]);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 7 + t);
    M2nBuffers b{Must(api->Malloc(0, sizes[t])),
                 Must(api->Malloc(0, sizes[t]))};
    ASSERT_OK(api->Copy2DAsync(b.source, sizes[t], host.data(), sizes[t],
                               sizes[t], 1, cuda::CopyKind::kHostToDevice,
                               stream));
    buffers.push_back(b);
    hosts.push_back(std::move(host));
  }
  ASSERT_OK(api->SynchronizeStream(stream));
  ASSERT_OK(m2n->Run(tensors, buffers, nullptr));
  ASSERT_OK(m2n->Synchronize(nullptr));
  for (size_t t = 0; t < 2; ++t) {
    std::vector<uint8_t> back(sizes[t]);
    ASSERT_OK(api->Copy2DAsync(back.data(), sizes[t], buffers[t].target,
                               sizes[t], sizes[t], 1,
                               cuda::CopyKind::kDeviceToHost, stream));
    ASSERT_OK(api->SynchronizeStream(stream));
    EXPECT_EQ(back, hosts[t]) << tensors[t].tensor_id;
    ASSERT_OK(api->Free(buffers[t].source));
    ASSERT_OK(api->Free(buffers[t].target));
  }
  ASSERT_OK(api->DestroyStream(stream));
}

}  // namespace
}  // namespace reshard::m2n
