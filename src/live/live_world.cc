#include "live/live_world.h"

#include <unistd.h>

#include "live/live_records.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/sdk/record_store.h"
#include "util/sha256.h"

namespace reshard::live_internal {

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::vector<std::string> ParticipantsOf(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  std::vector<std::string> out;
  for (const auto& b : bindings) out.push_back(b.participant_id());
  return out;
}

namespace {

// The exchange is registered (the error lists those that are) and takes
// the settings.
Status CheckExchange(const LiveSessionOptions& o) {
  auto found = FindPeerExchange(o.exchange);
  if (!found.ok()) return found.status().WithContext("live session");
  const PeerExchangeBackend& backend = **found;
  if (backend.check_options) {
    return backend.check_options(o.exchange_options)
        .WithContext("live session");
  }
  if (o.exchange_options.empty()) return Status::OK();
  return Status::InvalidArgument("live session: peer exchange \"" + o.exchange +
                                 "\" takes no settings (got " +
                                 o.exchange_options.settings[0].first + ")");
}

}  // namespace

Status ValidateOptions(const LiveSessionOptions& o) {
  if (o.session.empty() || o.session.find('/') != std::string::npos) {
    return Status::InvalidArgument(
        "live session key must be one record-key component, got \"" +
        o.session + "\"");
  }
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(o.session));
  if (o.ranks == 0) return Status::InvalidArgument("live session: ranks is 0");
  if (o.rank >= o.ranks) {
    return Status::InvalidArgument("live session: rank " +
                                   std::to_string(o.rank) + " is not below " +
                                   std::to_string(o.ranks) + " ranks");
  }
  RESHARD_RETURN_NOT_OK(CheckExchange(o));
  if (o.max_in_flight == 0) {
    return Status::InvalidArgument("live session: max_in_flight is 0");
  }
  if (o.target_declaration.size() > kMaxTargetDeclarationBytes) {
    return Status::InvalidArgument(
        "live session: target_declaration holds " +
        std::to_string(o.target_declaration.size()) + " bytes (at most " +
        std::to_string(kMaxTargetDeclarationBytes) + ")");
  }
  if (o.heartbeat_interval.count() < 0 ||
      (o.heartbeat_interval.count() > 0 &&
       o.peer_timeout < 2 * o.heartbeat_interval)) {
    return Status::InvalidArgument(
        "live session: peer_timeout (" +
        std::to_string(o.peer_timeout.count()) +
        " ms) must be at least twice heartbeat_interval (" +
        std::to_string(o.heartbeat_interval.count()) + " ms)");
  }
  if (o.rejoin_timeout.count() < 0) {
    return Status::InvalidArgument("live session: rejoin_timeout (" +
                                   std::to_string(o.rejoin_timeout.count()) +
                                   " ms) is negative");
  }
  if (o.delta && o.protocol == LiveProtocol::kPull) {
    return Status::InvalidArgument(
        "live session: delta needs push (a source encodes the changes it "
        "sends)");
  }
  if (o.movable_sources && o.protocol == LiveProtocol::kPull) {
    return Status::InvalidArgument(
        "live session: movable_sources needs push (a pull session's sources "
        "are registered once, at open)");
  }
  return Status::OK();
}

Result<World> ReadWorld(SessionRecords& s, RecordStore& store,
                        const LiveSessionOptions& o) {
  World w;
  w.addresses.resize(o.ranks);
  w.hosts.resize(o.ranks);
  w.incarnations.resize(o.ranks);
  for (uint32_t r = 0; r < o.ranks; ++r) {
    const std::string rank_key = s.Key("rank", r);
    RESHARD_ASSIGN_OR_RETURN(std::string rank_text, s.Get(rank_key));
    RESHARD_ASSIGN_OR_RETURN(
        auto rank_record,
        internal::DecodeRankRecord(rank_text, rank_key, r, o.ranks));
    w.hosts[r] = std::move(rank_record.host);
    w.incarnations[r] = rank_record.incarnation;
    const std::string address_key = s.Key("address", r);
    RESHARD_ASSIGN_OR_RETURN(std::string address_text, s.Get(address_key));
    RESHARD_ASSIGN_OR_RETURN(w.addresses[r], internal::DecodeAddressRecord(
                                                 address_text, address_key, r));
    RESHARD_ASSIGN_OR_RETURN(auto keys, store.List(o.session + "/bindings/" +
                                                   std::to_string(r) + "/"));
    for (const std::string& key : keys) {
      RESHARD_ASSIGN_OR_RETURN(std::string json, store.Get(key));
      auto b = WeightRuntimeBindingFromJson(json);
      if (!b.ok()) {
        return b.status().WithContext("binding published by rank " +
                                      std::to_string(r) + " (" + key + ")");
      }
      const std::string name = key.substr(key.rfind('/') + 1);
      const bool source = name.starts_with("source-");
      if (!source && !name.starts_with("target-")) {
        return Status::InvalidArgument("live session " + o.session +
                                       ": unexpected record " + key);
      }
      auto& ranks = source ? w.source_rank : w.target_rank;
      auto [it, fresh] = ranks.emplace(b->participant_id(), r);
      if (!fresh) {
        return Status::InvalidArgument(
            std::string(source ? "source" : "target") + " participant " +
            b->participant_id() + " is published by rank " +
            std::to_string(it->second) + " and rank " + std::to_string(r));
      }
      (source ? w.sources : w.targets).push_back(std::move(*b));
    }
  }
  return w;
}

std::string RankName(uint32_t rank, const World& w) {
  std::vector<std::string> who;
  for (const auto& [p, r] : w.source_rank) {
    if (r == rank) who.push_back("source " + p);
  }
  for (const auto& [p, r] : w.target_rank) {
    if (r == rank) who.push_back("target " + p);
  }
  std::string out = "rank " + std::to_string(rank);
  if (who.empty()) return out;
  out += " (" + who[0];
  if (who.size() > 1) {
    out += " and " + std::to_string(who.size() - 1) + " more";
  }
  return out + ")";
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

uint32_t SessionTag(const std::string& session) {
  const std::string h = internal::Sha256Hex(session);
  return static_cast<uint32_t>(std::stoul(h.substr(0, 8), nullptr, 16));
}

Status SameParticipants(const std::vector<WeightRuntimeBindingManifest>& now,
                        const std::vector<WeightRuntimeBindingManifest>& then,
                        std::string_view side) {
  if (ParticipantsOf(now) == ParticipantsOf(then)) return Status::OK();
  std::string names;
  for (const auto& b : then) {
    names += (names.empty() ? "" : ", ") + b.participant_id();
  }
  return Status::InvalidArgument(
      "an update's " + std::string(side) +
      " bindings must be for the participants the session was opened with (" +
      (names.empty() ? "none" : names) + "), in that order");
}

bool SameBinding(const WeightRuntimeBindingManifest& a,
                 const WeightRuntimeBindingManifest& b) {
  return WeightRuntimeBindingToJson(a) == WeightRuntimeBindingToJson(b);
}

void Replace(const std::vector<WeightRuntimeBindingManifest>& now,
             std::vector<WeightRuntimeBindingManifest>& world) {
  for (const auto& b : now) {
    for (auto& w : world) {
      if (w.participant_id() == b.participant_id()) w = b;
    }
  }
}

}  // namespace reshard::live_internal
