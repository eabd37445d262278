// RunLiveReshard: rendezvous, plan, bind, fence, UCX exchange, completion
// barrier. See include/reshard/live.h for the lifecycle.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "exec/region_copy.h"
#include "exec/ucx/ucx_exchange.h"
#include "exec/ucx/ucx_handles.h"
#include "live/live_records.h"
#include "reshard/bound_plan.h"
#include "reshard/live.h"
#include "reshard/local_transport.h"
#include "reshard/plan.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;
using internal::RemoteRange;
using internal::UcxEndpoint;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// One rank's view of the session's records.
class Session {
 public:
  Session(RecordStore& store, const LiveSessionOptions& options)
      : store_(store), options_(options), prefix_(options.session + "/") {}

  std::string Key(std::string_view kind, uint32_t rank) const {
    return prefix_ + std::string(kind) + "/" + std::to_string(rank);
  }
  std::string Key(std::string_view kind) const {
    return Key(kind, options_.rank);
  }

  Status Put(const std::string& key, std::string_view value) {
    return store_.Put(key, value);
  }
  Result<std::string> Get(const std::string& key) { return store_.Get(key); }
  Result<std::vector<std::string>> List(std::string_view kind) {
    return store_.List(prefix_ + std::string(kind) + "/");
  }

  // Records this rank's failure for the others (first reason wins) and
  // returns `st`.
  Status Abort(const Status& st) {
    (void)store_.Put(Key("abort"),
                     internal::EncodeAbortRecord(options_.rank, st.ToString()));
    return st;
  }

  // An error if another rank aborted.
  Status CheckAborts() {
    RESHARD_ASSIGN_OR_RETURN(auto keys, List("abort"));
    for (const std::string& key : keys) {
      RESHARD_ASSIGN_OR_RETURN(uint32_t who, RankOfKey(key));
      if (who == options_.rank) continue;
      // Whatever the record holds, the session is over; a malformed record
      // is reported as the reason.
      std::string reason;
      auto text = store_.Get(key);
      if (!text.ok()) {
        reason = "(unreadable reason: " + text.status().ToString() + ")";
      } else {
        auto decoded = internal::DecodeAbortRecord(*text, key, who);
        reason = decoded.ok() ? *decoded : decoded.status().ToString();
      }
      return Status::Aborted("live session " + options_.session +
                             " aborted by rank " + std::to_string(who) + ": " +
                             reason);
    }
    return Status::OK();
  }

  // The rank a key of kind/<r>[/...] belongs to; an error for a key that
  // names no rank of this session (a stray or forged record).
  Result<uint32_t> RankOfKey(std::string_view key) const {
    std::string_view rest = key.substr(prefix_.size());
    rest = rest.substr(rest.find('/') + 1);
    const std::string_view digits = rest.substr(0, rest.find('/'));
    uint64_t r = 0;
    bool ok = !digits.empty() && digits.size() <= 10 &&
              (digits.size() == 1 || digits[0] != '0');
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9';
      r = r * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || r >= options_.ranks) {
      return Status::InvalidArgument(
          "live session " + options_.session + ": record " + std::string(key) +
          " names no rank of " + std::to_string(options_.ranks));
    }
    return static_cast<uint32_t>(r);
  }

  // Waits until every rank has a record of `kind`, polling aborts and
  // `poll` (endpoint health, progress) in between.
  Status WaitForAll(std::string_view kind, Clock::time_point deadline,
                    const std::function<Status()>& poll) {
    auto sleep = std::chrono::microseconds(200);
    while (true) {
      RESHARD_ASSIGN_OR_RETURN(auto keys, List(kind));
      for (const std::string& key : keys) {
        RESHARD_RETURN_NOT_OK(RankOfKey(key).status());
      }
      if (keys.size() >= options_.ranks) return Status::OK();
      RESHARD_RETURN_NOT_OK(CheckAborts());
      if (poll) RESHARD_RETURN_NOT_OK(poll());
      if (Clock::now() >= deadline) {
        std::set<std::string> have(keys.begin(), keys.end());
        std::string missing;
        for (uint32_t r = 0; r < options_.ranks; ++r) {
          if (!have.count(Key(kind, r))) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          }
        }
        return Status::Unavailable(
            "live session " + options_.session + ": timed out after " +
            std::to_string(options_.timeout.count()) + " ms waiting for " +
            std::string(kind) + " of rank(s) " + missing);
      }
      if (!poll) {
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(10000));
      }
    }
  }

 private:
  RecordStore& store_;
  const LiveSessionOptions& options_;
  std::string prefix_;
};

std::vector<std::string> ParticipantsOf(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  std::vector<std::string> out;
  for (const auto& b : bindings) out.push_back(b.participant_id());
  return out;
}

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
  if (o.max_in_flight == 0) {
    return Status::InvalidArgument("live session: max_in_flight is 0");
  }
  return Status::OK();
}

// Everything the other ranks published.
struct World {
  std::vector<WeightRuntimeBindingManifest> sources, targets;
  std::map<std::string, uint32_t> source_rank, target_rank;
  std::vector<std::string> addresses;  // by rank
  std::vector<std::string> hosts;      // by rank
};

Result<World> ReadWorld(Session& s, RecordStore& store,
                        const LiveSessionOptions& o) {
  World w;
  w.addresses.resize(o.ranks);
  w.hosts.resize(o.ranks);
  for (uint32_t r = 0; r < o.ranks; ++r) {
    const std::string rank_key = s.Key("rank", r);
    RESHARD_ASSIGN_OR_RETURN(std::string rank_text, s.Get(rank_key));
    RESHARD_ASSIGN_OR_RETURN(
        auto rank_record,
        internal::DecodeRankRecord(rank_text, rank_key, r, o.ranks));
    w.hosts[r] = std::move(rank_record.host);
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

}  // namespace

Result<LiveReport> RunLiveReshard(RecordStore& store,
                                  const WeightPlacementManifest& source,
                                  const WeightPlacementManifest& target,
                                  const LiveBindings& bindings,
                                  const LiveSessionOptions& options) {
  RESHARD_RETURN_NOT_OK(ValidateOptions(options));
  Session s(store, options);
  // A rank joins a session once: records of its own from an earlier run
  // would be taken for this run's by the other ranks (and its writes would
  // fail). Nothing is recorded, so the earlier run's records stay as they
  // are.
  {
    RESHARD_ASSIGN_OR_RETURN(auto keys, store.List(options.session + "/"));
    std::vector<std::string> own;
    for (const std::string& key : keys) {
      std::string_view rest =
          std::string_view(key).substr(options.session.size() + 1);
      const size_t slash = rest.find('/');
      if (slash == std::string_view::npos) continue;
      rest = rest.substr(slash + 1);
      if (rest.substr(0, rest.find('/')) == std::to_string(options.rank)) {
        own.push_back(key);
      }
    }
    if (!own.empty()) {
      return Status::AlreadyExists(
          "live session " + options.session + ": rank " +
          std::to_string(options.rank) + " already has " +
          std::to_string(own.size()) + " record(s) (" + own[0] +
          (own.size() > 1 ? ", ..." : "") +
          ") from an earlier run; use a new session key");
    }
  }
  LiveReport report;
  const auto start = Clock::now();
  auto deadline = [&] { return Clock::now() + options.timeout; };
  // Every failure from here on is recorded for the other ranks.
  auto run = [&]() -> Status {
    RESHARD_ASSIGN_OR_RETURN(auto context,
                             internal::UcxContext::Make(options.ucx));
    RESHARD_ASSIGN_OR_RETURN(auto worker, internal::UcxWorker::Make(context));
    RESHARD_ASSIGN_OR_RETURN(std::string address, worker.Address());
    std::map<uint32_t, std::unique_ptr<UcxEndpoint>> peers;
    std::vector<std::unique_ptr<internal::UcxMemory>> mems;
    std::vector<std::unique_ptr<internal::UcxRemoteKey>> rkeys;
    // A failed session abandons its UCX resources rather than progressing
    // or tearing them down (see UcxWorker::Abandon); declared after them,
    // so it runs first.
    bool succeeded = false;
    struct AbandonOnFailure {
      bool& succeeded;
      internal::UcxContext& context;
      internal::UcxWorker& worker;
      std::map<uint32_t, std::unique_ptr<UcxEndpoint>>& peers;
      std::vector<std::unique_ptr<internal::UcxMemory>>& mems;
      std::vector<std::unique_ptr<internal::UcxRemoteKey>>& rkeys;
      ~AbandonOnFailure() {
        if (succeeded) {
          rkeys.clear();  // before their endpoints
          return;
        }
        for (auto& k : rkeys) k->Abandon();
        for (auto& m : mems) m->Abandon();
        for (auto& [r, ep] : peers) ep->Abandon();
        worker.Abandon();
        context.Abandon();
      }
    } abandon{succeeded, context, worker, peers, mems, rkeys};

    // 1. Publish: bindings, address, then the rank record (the marker).
    for (size_t i = 0; i < bindings.sources.size(); ++i) {
      RESHARD_RETURN_NOT_OK(
          s.Put(s.Key("bindings") + "/source-" + std::to_string(i),
                WeightRuntimeBindingToJson(bindings.sources[i])));
    }
    for (size_t i = 0; i < bindings.targets.size(); ++i) {
      RESHARD_RETURN_NOT_OK(
          s.Put(s.Key("bindings") + "/target-" + std::to_string(i),
                WeightRuntimeBindingToJson(bindings.targets[i])));
    }
    RESHARD_RETURN_NOT_OK(s.Put(s.Key("address"), internal::EncodeAddressRecord(
                                                      options.rank, address)));
    // Pull (possibly, under kAuto): register every source fragment and
    // publish the keys.
    const bool may_pull =
        options.protocol == LiveProtocol::kPull ||
        (options.protocol == LiveProtocol::kAuto && options.ucx.tls.empty());
    if (may_pull && !bindings.sources.empty()) {
      for (const auto& b : bindings.sources) {
        for (const auto& f : b.fragments()) {
          RESHARD_ASSIGN_OR_RETURN(
              auto m, internal::UcxMemory::Map(
                          context, reinterpret_cast<void*>(f.address()),
                          std::max<uint64_t>(f.nbytes(), 1)));
          mems.push_back(std::move(m));
        }
      }
      std::vector<RemoteRange> ranges;
      for (const auto& m : mems) {
        ranges.push_back({m->address(), m->length(), m->packed_key()});
      }
      RESHARD_RETURN_NOT_OK(
          s.Put(s.Key("rkeys"),
                internal::EncodeRemoteKeysRecord(options.rank, ranges)));
    }
    RESHARD_RETURN_NOT_OK(s.Put(
        s.Key("rank"),
        internal::EncodeRankRecord({HostName(), options.rank, options.ranks})));
    if (options.on_stage) options.on_stage("published");

    // 2. Plan while the others publish; then bind with everybody's
    //    bindings and fence our own.
    RESHARD_ASSIGN_OR_RETURN(auto plan,
                             LogicalTransferPlan::Make(source, target));
    report.regions = plan.regions().size();
    const auto waiting = Clock::now();
    RESHARD_RETURN_NOT_OK(s.WaitForAll("rank", deadline(), nullptr));
    const double waited = Seconds(waiting);
    RESHARD_ASSIGN_OR_RETURN(World world, ReadWorld(s, store, options));
    bool pull = options.protocol == LiveProtocol::kPull;
    if (options.protocol == LiveProtocol::kAuto && may_pull) {
      pull = true;  // when every rank runs on this host
      for (uint32_t r = 0; r < options.ranks && pull; ++r) {
        pull = world.hosts[r] == HostName();
      }
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto bound, BoundTransferPlan::Bind(plan, source, world.sources, target,
                                            world.targets));
    // Host memory only, on every rank alike: a device pointer is never
    // handed to UCX as host memory.
    RESHARD_RETURN_NOT_OK(bound.RequireMemoryKinds({MemoryKind::kHost}, "ucx"));
    LiveBindings current = bindings;
    if (options.current_bindings) {
      RESHARD_ASSIGN_OR_RETURN(current, options.current_bindings());
    }
    RESHARD_RETURN_NOT_OK(bound.CheckCurrentFor(
        ParticipantsOf(bindings.sources), current.sources,
        ParticipantsOf(bindings.targets), current.targets));

    // 3. Our share: sends, receives, local copies.
    const bool peer_errors = internal::UsePeerErrorHandling(options.ucx);
    auto peer = [&](uint32_t r) -> Result<UcxEndpoint*> {
      auto it = peers.find(r);
      if (it != peers.end()) return it->second.get();
      RESHARD_ASSIGN_OR_RETURN(
          auto ep, UcxEndpoint::Connect(worker, world.addresses[r],
                                        RankName(r, world), peer_errors));
      return peers.emplace(r, std::move(ep)).first->second.get();
    };
    // Pull: the peers' registered ranges, and keys unpacked per range.
    std::map<uint32_t, std::vector<RemoteRange>> ranges;
    std::map<std::pair<uint32_t, size_t>, ucp_rkey_h> unpacked;
    auto remote_key = [&](uint32_t r, UcxEndpoint* ep,
                          const BoundRegion& br) -> Result<ucp_rkey_h> {
      auto it = ranges.find(r);
      if (it == ranges.end()) {
        const std::string key = s.Key("rkeys", r);
        RESHARD_ASSIGN_OR_RETURN(std::string text, s.Get(key));
        RESHARD_ASSIGN_OR_RETURN(
            auto decoded, internal::DecodeRemoteKeysRecord(text, key, r));
        it = ranges.emplace(r, std::move(decoded)).first;
      }
      const auto& list = it->second;
      auto at = std::upper_bound(
          list.begin(), list.end(), br.source_address,
          [](uint64_t a, const RemoteRange& x) { return a < x.address; });
      if (at == list.begin() ||
          br.source_address + 1 >
              std::prev(at)->address + std::prev(at)->length) {
        return Status::InvalidArgument(
            "region " + std::to_string(br.region) + ": rank " +
            std::to_string(r) + " published no remote key for its source");
      }
      const size_t index = static_cast<size_t>(std::prev(at) - list.begin());
      auto [u, fresh] = unpacked.emplace(std::make_pair(r, index), nullptr);
      if (fresh) {
        RESHARD_ASSIGN_OR_RETURN(
            auto key, internal::UcxRemoteKey::Unpack(*ep, list[index].packed));
        u->second = key->get();
        rkeys.push_back(std::move(key));
      }
      return u->second;
    };
    std::vector<internal::ExchangeOp> ops;
    std::vector<const BoundRegion*> local;
    for (const BoundRegion& br : bound.regions()) {
      const TransferRegion& lr = plan.regions()[br.region];
      const uint32_t from = world.source_rank.at(
          plan.source_fragments()[lr.source_fragment].participant_id);
      const uint32_t to = world.target_rank.at(
          plan.target_fragments()[lr.target_fragment].participant_id);
      using Kind = internal::ExchangeOp::Kind;
      const bool pulled = pull && internal::PulledRegion(br);
      if (from == options.rank && to == options.rank) {
        local.push_back(&br);
      } else if (from == options.rank) {
        RESHARD_ASSIGN_OR_RETURN(auto* ep, peer(to));
        if (!pulled) ops.push_back({&br, ep, Kind::kSend});
      } else if (to == options.rank) {
        RESHARD_ASSIGN_OR_RETURN(auto* ep, peer(from));
        if (!pulled) {
          ops.push_back({&br, ep, Kind::kReceive});
          continue;
        }
        RESHARD_ASSIGN_OR_RETURN(ucp_rkey_h key, remote_key(from, ep, br));
        ops.push_back({&br, ep, Kind::kGet, key});
      }
    }
    std::vector<UcxEndpoint*> endpoints;
    for (auto& [r, ep] : peers) endpoints.push_back(ep.get());
    RESHARD_RETURN_NOT_OK(internal::WireUp(worker, endpoints, deadline(),
                                           [&] { return s.CheckAborts(); }));
    // Plan, bind, fence and connect; not the wait for the others to publish.
    report.plan_seconds = Seconds(start) - waited;
    const auto t0 = Clock::now();
    internal::ExchangeOptions xo;
    xo.session_tag = SessionTag(options.session);
    xo.max_in_flight = options.max_in_flight;
    xo.deadline = deadline();
    xo.poll_abort = [&] { return s.CheckAborts(); };
    xo.on_first_completion = [&] {
      if (options.on_stage) options.on_stage("transfer");
    };
    internal::ExchangeStats stats;
    // Local copies first: they need no peer.
    for (const BoundRegion* br : local) {
      uint64_t rows = 1;
      for (const OuterLoop& l : br->loops) rows *= l.count;
      internal::CopyRegionSegments(*br, 0, rows);
      report.bytes_received += br->bytes;
    }
    report.local_operations = local.size();
    RESHARD_RETURN_NOT_OK(internal::RunUcxExchange(worker, ops, xo, &stats));
    report.operations = local.size() + stats.messages_received;
    report.messages_sent = stats.messages_sent;
    report.gets = stats.gets;
    report.packed_messages = stats.packed_messages;
    report.bytes_sent = stats.bytes_sent;
    report.bytes_received += stats.bytes_received;

    report.transfer_seconds = Seconds(t0);

    // 4. Completion of our targets, then "done".
    if (options.on_stage) options.on_stage("completing");
    if (options.validate_targets)
      RESHARD_RETURN_NOT_OK(options.validate_targets());
    RESHARD_RETURN_NOT_OK(
        s.Put(s.Key("done"), internal::EncodeMarkerRecord(options.rank)));
    if (options.on_stage) options.on_stage("done");

    // 5. World barrier; keep progressing (peers may still fetch from us)
    //    and watch our peers' health.
    const auto t1 = Clock::now();
    RESHARD_RETURN_NOT_OK(s.WaitForAll("done", deadline(), [&]() -> Status {
      for (const auto& [r, ep] : peers) {
        if (!ep->failure().ok()) return ep->failure();
      }
      worker.ProgressOrWait(std::chrono::milliseconds(5));
      return Status::OK();
    }));
    for (uint32_t r = 0; r < options.ranks; ++r) {
      const std::string key = s.Key("done", r);
      RESHARD_ASSIGN_OR_RETURN(std::string text, s.Get(key));
      RESHARD_RETURN_NOT_OK(internal::DecodeMarkerRecord(text, key, r));
    }
    report.barrier_seconds = Seconds(t1);

    // 6. Activation-ready.
    if (!bindings.targets.empty()) {
      RESHARD_RETURN_NOT_OK(
          s.Put(s.Key("ready"), internal::EncodeMarkerRecord(options.rank)));
      report.ready = true;
    }
    succeeded = true;
    return Status::OK();
  };
  Status st = run();
  if (!st.ok() && !st.IsAborted()) {
    // When another rank failed first (its death or abort explains ours,
    // e.g. an endpoint that cannot connect to it), report that cause.
    Status first = s.CheckAborts();
    if (!first.ok()) st = first.WithContext(st.message());
  }
  if (!st.ok()) {
    return s.Abort(st.WithContext("live session " + options.session +
                                  ", rank " + std::to_string(options.rank)));
  }
  return report;
}

Result<std::unique_ptr<RecordStore>> OpenRendezvous(std::string_view uri) {
  std::string_view path = uri;
  if (uri.starts_with("fs://")) {
    path.remove_prefix(5);
  } else if (uri.find("://") != std::string_view::npos) {
    return Status::InvalidArgument("unsupported rendezvous URI \"" +
                                   std::string(uri) +
                                   "\" (supported: fs://PATH or a directory)");
  }
  if (path.empty()) {
    return Status::InvalidArgument("rendezvous URI \"" + std::string(uri) +
                                   "\" names no directory");
  }
  return OpenDirectoryRecordStore(std::string(path));
}

}  // namespace reshard
