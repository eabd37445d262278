// The local entry points' executor: host plans on the local executor,
// plans touching CUDA memory on the CUDA executor, and where there is none
// a refusal in one line naming the first CUDA fragment.
#include "api/auto_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "exec_cuda/host_device_api.h"
#include "reshard/api.h"
#include "reshard/backends/cuda_transport.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

// A one-fragment cube (12 x 16 bytes), its single fragment's id and
// participant.
struct OneFragment {
  WeightPlacementManifest m = testing::CubeLayout(1, 0, Dims{12, 16});
  std::string id = m.fragments()[0]->placement_fragment_id();
  std::string participant = m.parts()[0].participant_id();
  std::vector<uint8_t> bytes = std::vector<uint8_t>(12 * 16);

  WeightRuntimeBindingManifest Bind(const std::string& device,
                                    const std::string& instance) {
    BufferBindingOptions o;
    o.device = device;
    o.instance_id = instance;
    return Must(BindBuffers(
        m, participant, std::map<std::string, void*>{{id, bytes.data()}}, o));
  }
};

CudaTransportFactory Unavailable(std::string why) {
  return [why]() -> Result<std::unique_ptr<Transport>> {
    return Status::FailedPrecondition(why);
  };
}

TEST(AutoTransportTest, HostPlansGoToTheLocalExecutor) {
  OneFragment src, dst;
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = i * 7 + 1;
  auto t = Must(MakeAutoTransport({}, Unavailable("never asked")));
  ASSERT_OK(
      Reshard(src.m, {src.Bind("cpu", "a")}, dst.m, {dst.Bind("cpu", "b")}, *t)
          .status());
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST(AutoTransportTest, ACudaFragmentWithoutACudaExecutorIsOneLineNamingIt) {
  OneFragment src, dst;
  auto t = Must(MakeAutoTransport(
      {}, Unavailable("CUDA executor unavailable: no CUDA device")));
  EXPECT_THAT(
      Reshard(src.m, {src.Bind("cpu", "a")}, dst.m, {dst.Bind("cuda:0", "b")},
              *t)
          .status(),
      StatusIs(StatusCode::kFailedPrecondition,
               "local executor cannot move cuda memory: target fragment " +
                   dst.id + " of participant " + dst.participant +
                   " (device \"cuda:0\"); CUDA executor unavailable: no CUDA "
                   "device"));
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(12 * 16, 0));
}

TEST(AutoTransportTest, ACudaPlanGoesToTheCudaExecutorMadeOnce) {
  OneFragment src, dst;
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = i * 5 + 3;
  std::shared_ptr<cuda::HostDeviceApi> api = cuda::HostDeviceApi::Make({});
  auto* device = static_cast<uint8_t*>(Must(api->Malloc(0, 12 * 16)));
  BufferBindingOptions o;
  o.device = "cuda:0";
  o.instance_id = "b";
  const auto target =
      Must(BindBuffers(dst.m, dst.participant,
                       std::map<std::string, void*>{{dst.id, device}}, o));
  int made = 0;
  auto t =
      Must(MakeAutoTransport({}, [&]() -> Result<std::unique_ptr<Transport>> {
        ++made;
        return cuda::MakeTransportOver(api, {});
      }));
  for (int round = 0; round < 2; ++round) {
    const std::vector<WeightRuntimeBindingManifest> sources{
        src.Bind("cpu", "a")};
    const std::vector<WeightRuntimeBindingManifest> targets{target};
    ASSERT_OK(Reshard(src.m, sources, dst.m, targets, *t).status());
    EXPECT_EQ(std::memcmp(device, src.bytes.data(), src.bytes.size()), 0);
    src.bytes[round] ^= 0xFF;
  }
  EXPECT_EQ(made, 1);
  EXPECT_GT(api->counters().copies_run, 0u);
  ASSERT_OK(api->Free(device));
}

// The public entry point on this machine: a CUDA fragment is refused in
// one line whose reason is this build's (no CUDA backend, or no device).
TEST(AutoTransportTest, ReshardWithoutATransportRefusesCudaHereInOneLine) {
  const CudaInfo info = QueryCuda();
  if (info.devices > 0) GTEST_SKIP() << "a CUDA device is present";
  OneFragment src, dst;
  const Status st =
      Reshard(src.m, {src.Bind("cpu", "a")}, dst.m, {dst.Bind("cuda:1", "b")})
          .status();
  const std::string why =
      info.built ? "CUDA executor unavailable: no CUDA device on this machine"
                 : "CUDA executor unavailable: this build has no CUDA backend "
                   "(configure with -DRESHARD_CUDA=ON where nvcc is installed)";
  const std::string line =
      "local executor cannot move cuda memory: target "
      "fragment " +
      dst.id + " of participant " + dst.participant + " (device \"cuda:1\"); " +
      why;
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition, line));
  // With a plan made earlier, the same executor and the same line.
  const auto plan = Must(LogicalTransferPlan::Make(src.m, dst.m));
  const auto sources =
      Must(CheckedBindings::Make(src.m, {src.Bind("cpu", "a")}));
  const auto targets =
      Must(CheckedBindings::Make(dst.m, {dst.Bind("cuda:1", "b")}));
  EXPECT_THAT(Reshard(plan, src.m, sources, dst.m, targets),
              StatusIs(StatusCode::kFailedPrecondition, line));
}

}  // namespace
}  // namespace reshard::internal
