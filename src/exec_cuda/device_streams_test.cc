// DeviceStreams over the host emulation: one stream per device, made once;
// SynchronizeAll waits for each and keeps the first error; destruction
// waits for and destroys them, in the emulation's call log.

#include "exec_cuda/device_streams.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

TEST(DeviceStreamsTest, OneStreamPerDeviceMadeOnceAndReleased) {
  std::shared_ptr<HostDeviceApi> api = HostDeviceApi::Make({.devices = 2});
  {
    DeviceStreams streams(api);
    const StreamHandle zero = Must(streams.Of(0));
    const StreamHandle one = Must(streams.Of(1));
    EXPECT_NE(zero, one);
    EXPECT_EQ(Must(streams.Of(0)), zero);
    EXPECT_OK(streams.SynchronizeAll());
    EXPECT_THAT(streams.SynchronizeAll(Status::DataLoss("queued badly")),
                StatusIs(StatusCode::kDataLoss, "queued badly"));
  }
  EXPECT_EQ(api->calls(),
            (std::vector<std::string>{
                "CreateStream device=0 -> stream=1",
                "CreateStream device=1 -> stream=2", "Synchronize stream=1",
                "Synchronize stream=2", "Synchronize stream=1",
                "Synchronize stream=2", "Synchronize stream=1",
                "DestroyStream stream=1", "Synchronize stream=2",
                "DestroyStream stream=2"}));
}

TEST(DeviceStreamsTest, ADeviceTheApiLacksIsRefused) {
  std::shared_ptr<HostDeviceApi> api = HostDeviceApi::Make({.devices = 1});
  DeviceStreams streams(api);
  EXPECT_EQ(streams.Of(3).status().message(),
            "cudaErrorInvalidDevice: device 3 is not one of the 1 emulated "
            "devices");
  EXPECT_EQ(api->calls(),
            std::vector<std::string>{"CreateStream device=3 refused: "
                                     "cudaErrorInvalidDevice"});
  EXPECT_OK(streams.SynchronizeAll());
}

}  // namespace
}  // namespace reshard::cuda
