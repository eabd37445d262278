#include "live_exchange/peer_exchange.h"

#include <map>
#include <mutex>
#include <utility>

#include "bind/strided_stream.h"

namespace reshard::internal {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, PeerExchangeFactory, std::less<>> by_name;
};

// Built on first use: implementations register from static initialisers
// of other files, in an order nobody controls.
Registry& TheRegistry() {
  static Registry* registry = new Registry;
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
  return (StridedSide::Source(region).contiguous() &&
          StridedSide::Target(region).contiguous()) ||
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

bool RegisterPeerExchange(std::string name, PeerExchangeFactory factory) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_name.emplace(std::move(name), std::move(factory));
  return true;
}

Result<std::unique_ptr<PeerExchange>> MakePeerExchange(
    std::string_view name, const PeerExchangeConfig& config) {
  PeerExchangeFactory factory;
  {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_name.find(name);
    if (it != r.by_name.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& n : RegisteredPeerExchanges()) {
      known += (known.empty() ? "" : ", ") + n;
    }
    return Status::InvalidArgument(
        "unknown peer exchange \"" + std::string(name) +
        "\" (registered: " + (known.empty() ? "none" : known) + ")");
  }
  return factory(config);
}

bool PeerExchangeRegistered(std::string_view name) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.by_name.find(name) != r.by_name.end();
}

std::vector<std::string> RegisteredPeerExchanges() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, f] : r.by_name) out.push_back(name);
  return out;
}

}  // namespace reshard::internal
