// The conformance suite every peer exchange (reshard/sdk/peer_exchange.h)
// must pass: two ranks, each on a thread of its own, move a bound plan's
// regions byte for byte as one message per region, as one coalesced
// message, and by remote reads (kGet) of registered memory; a short
// message is DataLoss naming the operation, the deadline is Unavailable,
// an abort polled during a run is returned as it is, and connecting again
// is a no-op (remote reads: where the exchange offers them). Pieces handed to
// on_piece are the streams that moved. A peer replaced by a new exchange at a
// new address is reached again after Disconnect and Connect (connections_made()
// counting the reconnect); a dead peer is named by PeerFailure() until it is
// disconnected.
//
// An exchange joins it with one line, naming its registered name:
//
//   INSTANTIATE_TEST_SUITE_P(MyExchange, PeerExchangeConformance,
//                            ::testing::Values("my-exchange"));
//
// or, to run it with settings, an ExchangeUnderTest in Values().

#ifndef RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_
#define RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>

#include "reshard/sdk/peer_exchange.h"

namespace reshard::testing {

// An exchange by its registered name, with settings.
struct ExchangeUnderTest {
  ExchangeUnderTest(const char* name) : name(name) {}  // NOLINT: implicit
  ExchangeUnderTest(std::string name, PeerExchangeOptions options,
                    bool sees_dead_peers = true, bool hands_pieces = false,
                    bool reads_remote = true)
      : name(std::move(name)),
        options(std::move(options)),
        sees_dead_peers(sees_dead_peers),
        hands_pieces(hands_pieces),
        reads_remote(reads_remote) {}

  std::string name;
  PeerExchangeOptions options;
  // Whether PeerFailure() names a peer whose exchange was destroyed (UCX
  // does only with peer error handling; without it a session relies on
  // its heartbeats). When false, the suite checks that it stays OK.
  bool sees_dead_peers = true;
  // Whether it hands the pieces of strided streams to on_piece (an
  // exchange that packs them itself should); the suite checks that it
  // does, or that it hands none.
  bool hands_pieces = false;
  // Whether it offers remote reads (kGet, RegisterMemory, ImportRemoteKey).
  // One that does not ("nccl": NCCL has sends and receives only) must say
  // so: RegisterMemory Unimplemented, and its capabilities never ask a
  // session to pull; the suite checks that instead of the reads.
  bool reads_remote = true;
};

void PrintTo(const ExchangeUnderTest& exchange, std::ostream* os);

class PeerExchangeConformance
    : public ::testing::TestWithParam<ExchangeUnderTest> {};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_PEER_EXCHANGE_CONFORMANCE_H_
