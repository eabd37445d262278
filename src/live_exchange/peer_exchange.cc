#include "reshard/sdk/peer_exchange.h"

#include <utility>

#include "bind/strided_stream.h"
#include "reshard/sdk/backend_registry.h"

namespace reshard {
namespace {

// Built on first use: implementations register from static initialisers
// of other files, in an order nobody controls.
NameRegistry<PeerExchangeBackend>& TheRegistry() {
  static auto* registry =
      new NameRegistry<PeerExchangeBackend>("peer exchange");
  return *registry;
}

}  // namespace

uint64_t ExchangeOp::bytes() const {
  if (buffer != nullptr) return buffer_bytes;
  uint64_t total = region->bytes;
  for (const BoundRegion* r : more) total += r->bytes;
  return total;
}

bool PulledRegion(const BoundRegion& region) {
  return (internal::StridedSide::Source(region).contiguous() &&
          internal::StridedSide::Target(region).contiguous()) ||
         region.inner_bytes >= kMinPulledRow;
}

std::string DescribeExchangeOp(const ExchangeOp& op,
                               const std::string& peer_name) {
  const bool send = op.kind == ExchangeOp::Kind::kSend;
  const char* verb = send                                    ? "sending"
                     : op.kind == ExchangeOp::Kind::kReceive ? "receiving"
                                                             : "reading";
  std::string regions = " region " + std::to_string(op.region->region);
  if (!op.more.empty()) {
    regions += " (and " + std::to_string(op.more.size()) +
               " more coalesced into one message)";
  }
  return std::string(verb) + regions + (send ? " to " : " from ") + peer_name;
}

Status RegisterPeerExchange(PeerExchangeBackend backend) {
  if (!backend.make) {
    return Status::InvalidArgument("peer exchange \"" + backend.name +
                                   "\": a registration needs a factory");
  }
  std::string name = backend.name;
  return TheRegistry().Add(std::move(name), std::move(backend));
}

Result<const PeerExchangeBackend*> FindPeerExchange(std::string_view name) {
  const PeerExchangeBackend* found = TheRegistry().Find(name);
  if (found != nullptr) return found;
  return Status::InvalidArgument(
      "unknown peer exchange \"" + std::string(name) +
      "\" (registered: " + TheRegistry().NameList() + ")");
}

Result<std::unique_ptr<PeerExchange>> MakePeerExchange(
    std::string_view name, const PeerExchangeConfig& config) {
  RESHARD_ASSIGN_OR_RETURN(const PeerExchangeBackend* backend,
                           FindPeerExchange(name));
  return backend->make(config);
}

std::vector<std::string> RegisteredPeerExchanges() {
  return TheRegistry().Names();
}

}  // namespace reshard
