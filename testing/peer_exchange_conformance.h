// The conformance suite every peer exchange (reshard/sdk/peer_exchange.h)
// must pass: two ranks, each on a thread of its own, move a bound plan's
// regions byte for byte as one message per region, as one coalesced
// message, and by remote reads (kGet) of registered memory; a short
// message is DataLoss naming the operation, the deadline is Unavailable,
// an abort polled during a run is returned as it is, and connecting again
// is a no-op.
//
// An exchange joins it with one line, naming its registered name:
//
//   INSTANTIATE_TEST_SUITE_P(MyExchange, PeerExchangeConformance,
//                            ::testing::Values("my-exchange"));

#ifndef RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_
#define RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <string>

namespace reshard::testing {

// The parameter is the exchange's registered name.
class PeerExchangeConformance : public ::testing::TestWithParam<std::string> {};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_
