// The UCX exchange passes the peer-exchange conformance suite (two ranks,
// each a thread of this process), over UCX's own choice of transports and
// over TCP.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  o.config = {{"RNDV_THRESH", "8192"}};
  const PeerExchangeOptions settings = ToPeerExchangeOptions(o);
  EXPECT_EQ(settings.settings,
            (std::vector<std::pair<std::string, std::string>>{
                {"tls", "tcp"},
                {"net_devices", "lo"},
                {"shm_segment_bytes", "0"},
                {"error_handling", "peer"},
                {"RNDV_THRESH", "8192"}}));
  const UcxOptions back = Must(UcxOptionsFromSettings(settings));
  EXPECT_EQ(back.tls, "tcp");
  EXPECT_EQ(back.net_devices, "lo");
  EXPECT_EQ(back.shm_segment_bytes, 0u);
  EXPECT_EQ(back.error_handling, UcxErrorHandling::kPeer);
  EXPECT_EQ(back.config, o.config);
}

TEST(UcxOptionsTest, UnknownAndMalformedSettingsAreRefusedByName) {
  PeerExchangeOptions bad;
  bad.Set("tsl", "tcp");
  EXPECT_THAT(UcxOptionsFromSettings(bad),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"ucx\" has no setting \"tsl\" (it "
                       "takes tls, net_devices, shm_segment_bytes, "
                       "error_handling and UCX settings by their names in "
                       "capitals)"));
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
