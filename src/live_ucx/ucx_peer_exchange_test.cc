// The UCX exchange passes the peer-exchange conformance suite (two ranks,
// each a thread of this process), over UCX's own choice of transports and
// over TCP.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "live_ucx/ucx_handles.h"
#include "reshard/backends/ucx_options.h"
#include "testing/must.h"
#include "testing/peer_exchange_conformance.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

// UcxOptions as settings by name and back: only what differs from the
// defaults, then the UCX settings in order.
TEST(UcxOptionsTest, SettingsByNameRoundTrip) {
  EXPECT_TRUE(ToPeerExchangeOptions(UcxOptions{}).empty());
  UcxOptions o;
  o.tls = "tcp";
  o.net_devices = "lo";
  o.shm_segment_bytes = 0;
  o.error_handling = UcxErrorHandling::kPeer;
  o.memory = UcxMemorySetting::kAuto;
  o.config = {{"RNDV_THRESH", "8192"}};
  const PeerExchangeOptions settings = ToPeerExchangeOptions(o);
  EXPECT_EQ(settings.settings,
            (std::vector<std::pair<std::string, std::string>>{
                {"tls", "tcp"},
                {"net_devices", "lo"},
                {"shm_segment_bytes", "0"},
                {"error_handling", "peer"},
                {"memory", "auto"},
                {"RNDV_THRESH", "8192"}}));
  const UcxOptions back = Must(UcxOptionsFromSettings(settings));
  EXPECT_EQ(back.tls, "tcp");
  EXPECT_EQ(back.net_devices, "lo");
  EXPECT_EQ(back.shm_segment_bytes, 0u);
  EXPECT_EQ(back.error_handling, UcxErrorHandling::kPeer);
  EXPECT_EQ(back.memory, UcxMemorySetting::kAuto);
  PeerExchangeOptions cuda;
  cuda.Set("memory", "cuda");
  EXPECT_EQ(ToPeerExchangeOptions(Must(UcxOptionsFromSettings(cuda))).settings,
            cuda.settings);
  EXPECT_EQ(back.config, o.config);
}

TEST(UcxOptionsTest, UnknownAndMalformedSettingsAreRefusedByName) {
  PeerExchangeOptions bad;
  bad.Set("tsl", "tcp");
  EXPECT_THAT(UcxOptionsFromSettings(bad),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"ucx\" has no setting \"tsl\" (it "
                       "takes tls, net_devices, shm_segment_bytes, "
                       "error_handling, memory and UCX settings by their "
                       "names in capitals)"));
  PeerExchangeOptions memory;
  memory.Set("memory", "device");
  EXPECT_THAT(UcxOptionsFromSettings(memory),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"ucx\": setting memory=\"device\" is "
                       "not auto, host or cuda"));
  PeerExchangeOptions errors;
  errors.Set("error_handling", "always");
  EXPECT_THAT(UcxOptionsFromSettings(errors),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"ucx\": setting "
                       "error_handling=\"always\" is not auto, peer or none"));
  PeerExchangeOptions segment;
  segment.Set("shm_segment_bytes", "32k");
  EXPECT_THAT(UcxOptionsFromSettings(segment),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"ucx\": setting "
                       "shm_segment_bytes=\"32k\" is not a decimal byte "
                       "count"));
}

// What the exchange tells the session: pull on one host only when UCX
// chooses its own transports.
TEST(UcxOptionsTest, PullOnOneHostOnlyWithUcxsOwnTransports) {
  EXPECT_TRUE(
      Must(MakePeerExchange("ucx", {0, {}}))->capabilities().pull_on_one_host);
  PeerExchangeConfig tcp;
  tcp.options.Set("tls", "tcp").Set("net_devices", "lo");
  EXPECT_FALSE(
      Must(MakePeerExchange("ucx", tcp))->capabilities().pull_on_one_host);
}

// The exchange declares what its UCX context reports: Debian's UCX (cma,
// ib, rdmacm; this machine's) has no CUDA transports, so host memory under
// auto and host, and no exchange under cuda, naming the setting. A UCX
// with CUDA support declares CUDA under auto and cuda.
TEST(UcxOptionsTest, MemoryKindsFollowThisUcxAndTheMemorySetting) {
  const uint64_t types =
      Must(Must(UcxContext::Make(UcxOptions{})).MemoryTypes());
  const bool ucx_cuda = (types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  const std::vector<MemoryKind> host{MemoryKind::kHost};
  const std::vector<MemoryKind> both{MemoryKind::kHost, MemoryKind::kCuda};
  // By default host only, whatever this UCX moves.
  EXPECT_EQ(Must(MakePeerExchange("ucx", {0, {}}))->capabilities().memory_kinds,
            host);
  PeerExchangeConfig as_reported;
  as_reported.options.Set("memory", "auto");
  EXPECT_EQ(
      Must(MakePeerExchange("ucx", as_reported))->capabilities().memory_kinds,
      ucx_cuda ? both : host);
  PeerExchangeConfig staged;
  staged.options.Set("memory", "host");
  EXPECT_EQ(Must(MakePeerExchange("ucx", staged))->capabilities().memory_kinds,
            host);
  PeerExchangeConfig cuda;
  cuda.options.Set("memory", "cuda");
  if (ucx_cuda) {
    EXPECT_EQ(Must(MakePeerExchange("ucx", cuda))->capabilities().memory_kinds,
              both);
    return;
  }
  EXPECT_THAT(MakePeerExchange("ucx", cuda),
              StatusIs(StatusCode::kFailedPrecondition,
                       "peer exchange \"ucx\": setting memory=\"cuda\", but "
                       "this UCX has no CUDA support (its context reports no "
                       "CUDA memory type)"));
}

// UCX's own choice of transports (shared memory and CMA here: no peer
// error handling, so a dead peer is not reported) and TCP over loopback
// (peer error handling, which reports it).
using ::reshard::testing::ExchangeUnderTest;
using ::reshard::testing::PeerExchangeConformance;
INSTANTIATE_TEST_SUITE_P(
    Ucx, PeerExchangeConformance,
    ::testing::Values(ExchangeUnderTest("ucx", {}, /*sees_dead_peers=*/false,
                                        /*hands_pieces=*/true),
                      ExchangeUnderTest("ucx",
                                        PeerExchangeOptions()
                                            .Set("tls", "tcp")
                                            .Set("net_devices", "lo"),
                                        /*sees_dead_peers=*/true,
                                        /*hands_pieces=*/true)));

}  // namespace
}  // namespace reshard::internal
