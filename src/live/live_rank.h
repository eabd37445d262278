// Internal to the live layer: one rank's view of a session's records
// (Session), what the other ranks published (World) and one rank's part of
// a session (LiveRank), shared by the one-shot RunLiveReshard
// (live_session.cc) and the standing LiveSession (standing_session.cc).
#ifndef RESHARD_LIVE_LIVE_RANK_H_
#define RESHARD_LIVE_LIVE_RANK_H_

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "live/heartbeat.h"
#include "live/live_delta.h"
#include "live/live_records.h"
#include "live_exchange/peer_exchange.h"
#include "reshard/backends/local_transport.h"
#include "reshard/bound_plan.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "util/sha256.h"

namespace reshard::live_internal {

using Clock = std::chrono::steady_clock;
using internal::RemoteRange;

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

  // The rank component of a key of this session, <kind>/<r>[/...] or
  // u/<generation>/<kind>/<r>[/...]; empty when the key has none.
  std::string_view RankComponent(std::string_view key) const {
    std::string_view rest = key.substr(prefix_.size());
    if (rest.starts_with("u/")) {
      rest.remove_prefix(2);
      rest.remove_prefix(std::min(rest.size(), rest.find('/') + 1));
    }
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return {};
    rest.remove_prefix(slash + 1);
    return rest.substr(0, rest.find('/'));
  }

  // This rank's records under the session (any kind, any update).
  Result<std::vector<std::string>> OwnRecords() {
    RESHARD_ASSIGN_OR_RETURN(auto keys, store_.List(prefix_));
    const std::string me = std::to_string(options_.rank);
    std::vector<std::string> own;
    for (const std::string& key : keys) {
      if (RankComponent(key) == me) own.push_back(key);
    }
    return own;
  }

  // Records this rank's failure in update `generation` (0: opening or a
  // one-shot run) for the others (first reason wins) and returns `st`.
  Status Abort(const Status& st, uint64_t generation) {
    (void)store_.Put(
        Key("abort"),
        internal::EncodeAbortRecord(options_.rank, st.ToString(), generation));
    return st;
  }

  // A predicate over ranks: those with a record of `kind`.
  std::function<bool(uint32_t)> Having(const std::string& kind) {
    return [this, kind](uint32_t r) { return Get(Key(kind, r)).ok(); };
  }

  // An error if another rank aborted, unless `exempt` excuses it (a rank
  // that voted "done" in the update being decided before it failed: its
  // failure does not decide that update).
  Status CheckAborts(const std::function<bool(uint32_t)>& exempt = nullptr) {
    RESHARD_ASSIGN_OR_RETURN(auto keys, List("abort"));
    for (const std::string& key : keys) {
      RESHARD_ASSIGN_OR_RETURN(uint32_t who, RankOfKey(key));
      if (who == options_.rank) continue;
      if (exempt && exempt(who)) continue;
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

  // Watches the other ranks' heartbeats from now on (heartbeat.h).
  void WatchPeers() {
    if (options_.heartbeat_interval.count() == 0) return;
    watch_.emplace(store_, prefix_, options_.rank, options_.ranks,
                   options_.peer_timeout);
  }

  // An error naming the first other rank that closed the session (its
  // closed record), unless `exempt` excuses it: a standing session's rank
  // that closed after fewer updates than this one never joins this
  // update, so it is named at once, like a dead one, rather than waited
  // for until the timeout. Lists the closed records at most every 20 ms
  // (they only matter to a rank that waits).
  Status CheckClosed(const std::function<bool(uint32_t)>& exempt = nullptr) {
    const auto now = Clock::now();
    if (now < next_closed_list_) return Status::OK();
    next_closed_list_ = now + std::chrono::milliseconds(20);
    RESHARD_ASSIGN_OR_RETURN(auto keys, List("closed"));
    for (const std::string& key : keys) {
      RESHARD_ASSIGN_OR_RETURN(uint32_t who, RankOfKey(key));
      if (who == options_.rank) continue;
      if (exempt && exempt(who)) continue;
      auto text = store_.Get(key);
      if (text.status().IsNotFound()) continue;  // removed since the List
      RESHARD_RETURN_NOT_OK(text.status());
      RESHARD_ASSIGN_OR_RETURN(auto closed,
                               internal::DecodeClosedRecord(*text, key, who));
      return Status::Aborted(
          "live session " + options_.session + ": rank " + std::to_string(who) +
          " closed the session after " + std::to_string(closed.updates) +
          (closed.updates == 1 ? " update" : " updates"));
    }
    return Status::OK();
  }

  // An error naming the first rank whose heartbeat stood still for
  // peer_timeout, unless `exempt` excuses it.
  Status CheckSilent(const std::function<bool(uint32_t)>& exempt = nullptr) {
    if (!watch_) return Status::OK();
    RESHARD_ASSIGN_OR_RETURN(auto silent, watch_->FirstSilent(exempt));
    if (!silent) return Status::OK();
    return Status::Unavailable("live session " + options_.session + ": rank " +
                               std::to_string(*silent) +
                               " stopped answering (no heartbeat for " +
                               std::to_string(watch_->SilentMillis(*silent)) +
                               " ms; it died or hangs)");
  }

  // CheckAborts, CheckClosed, then CheckSilent; `exempt` excuses ranks of
  // all three.
  Status CheckPeers(const std::function<bool(uint32_t)>& exempt = nullptr) {
    RESHARD_RETURN_NOT_OK(CheckAborts(exempt));
    RESHARD_RETURN_NOT_OK(CheckClosed(exempt));
    return CheckSilent(exempt);
  }

  // The rank a key of kind/<r>[/...] (or u/<generation>/kind/<r>[/...])
  // belongs to; an error for a key that names no rank of this session (a
  // stray or forged record).
  Result<uint32_t> RankOfKey(std::string_view key) const {
    const std::string_view digits = RankComponent(key);
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
      // A rank that passed this barrier may close before this rank's next
      // look sees its record (the "opened" barrier, then Close at once):
      // that is no early close.
      RESHARD_RETURN_NOT_OK(CheckClosed(Having(std::string(kind))));
      RESHARD_RETURN_NOT_OK(CheckSilent());
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
            (kind == "rank" ? std::string("the published bindings")
                            : std::string(kind)) +
            " of rank(s) " + missing);
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
  std::optional<PeerWatch> watch_;
  Clock::time_point next_closed_list_{};
};

// Everything the other ranks published.
struct World {
  std::vector<WeightRuntimeBindingManifest> sources, targets;
  // Participant id -> publishing rank (heterogeneous lookup by view).
  std::map<std::string, uint32_t, std::less<>> source_rank, target_rank;
  std::vector<std::string> addresses;  // by rank
  std::vector<std::string> hosts;      // by rank
};

double Seconds(Clock::time_point since);

std::vector<std::string> ParticipantsOf(
    const std::vector<WeightRuntimeBindingManifest>& bindings);

Status ValidateOptions(const LiveSessionOptions& o);

Result<World> ReadWorld(Session& s, RecordStore& store,
                        const LiveSessionOptions& o);

std::string RankName(uint32_t rank, const World& w);

std::string HostName();

uint32_t SessionTag(const std::string& session);

Status SameParticipants(const std::vector<WeightRuntimeBindingManifest>& now,
                        const std::vector<WeightRuntimeBindingManifest>& then,
                        std::string_view side);

// Equal physical identity: what the bound plan and the fence depend on.
bool SameBinding(const WeightRuntimeBindingManifest& a,
                 const WeightRuntimeBindingManifest& b);

// Replaces the entries of `world` that belong to participants of `now`.
void Replace(const std::vector<WeightRuntimeBindingManifest>& now,
             std::vector<WeightRuntimeBindingManifest>& world);

// One rank's run of a session, in the lifecycle steps of
// include/reshard/live.h: RefuseRejoin, then Publish, PlanAndBind, Fence,
// Connect, Exchange, Complete, Barrier and Ready; Abort records a failure
// of any of them for the other ranks. Owns this rank's peer exchange
// (peer_exchange.h): a successful run releases it, a failed one abandons
// it rather than progressing or tearing it down.
class LiveRank {
 public:
  LiveRank(RecordStore& store, const WeightPlacementManifest& source,
           const WeightPlacementManifest& target, const LiveBindings& bindings,
           const LiveSessionOptions& options)
      : records_(store, options),
        store_(store),
        source_(source),
        target_(target),
        bindings_(bindings),
        options_(options) {}

  LiveRank(const LiveRank&) = delete;
  LiveRank& operator=(const LiveRank&) = delete;

  ~LiveRank() {
    if (heartbeat_) heartbeat_->Stop(/*remove=*/false);
    if (!succeeded_ && exchange_) exchange_->Abandon();
  }

  // A rank joins a session once: records of its own from an earlier run
  // would be taken for this run's by the other ranks (and its writes would
  // fail). Nothing is recorded, so the earlier run's records stay as they
  // are.
  Status RefuseRejoin() {
    const std::string& session = options_.session;
    RESHARD_ASSIGN_OR_RETURN(auto own, records_.OwnRecords());
    if (own.empty()) return Status::OK();
    return Status::AlreadyExists(
        "live session " + session + ": rank " + std::to_string(options_.rank) +
        " already has " + std::to_string(own.size()) + " record(s) (" + own[0] +
        (own.size() > 1 ? ", ..." : "") +
        ") from an earlier run; use a new session key");
  }

  // Every step in order; the first failure stops the run.
  Status Run() {
    start_ = Clock::now();
    tag_ = SessionTag(options_.session);
    RESHARD_RETURN_NOT_OK(Publish());
    RESHARD_RETURN_NOT_OK(PlanAndBind());
    RESHARD_RETURN_NOT_OK(Connect());
    return RunUpdate();
  }

  // A standing session's opening: publish, plan, bind and connect once.
  // Nothing moves until RunUpdate.
  Status Open() {
    start_ = Clock::now();
    RESHARD_RETURN_NOT_OK(Publish());
    RESHARD_RETURN_NOT_OK(PlanAndBind());
    RESHARD_RETURN_NOT_OK(Connect());
    // Standing sessions only: a one-shot run has no next update.
    if (options_.delta) {
      delta_.emplace(*plan_, source_, options_.delta_threads);
    }
    // Wiring up needs both ends to progress: every rank stays until every
    // rank is connected, so none waits on a peer's caller later.
    RESHARD_RETURN_NOT_OK(records_.Put(
        records_.Key("opened"), internal::EncodeMarkerRecord(options_.rank)));
    RESHARD_RETURN_NOT_OK(
        records_.WaitForAll("opened", Deadline(), [&]() -> Status {
          exchange_->Progress(std::chrono::microseconds(200));
          return Status::OK();
        }));
    succeeded_ = true;  // resources are in a clean state
    return Status::OK();
  }

  // Scopes the next RunUpdate's records and tags to `generation`.
  void BeginUpdate(uint64_t generation) {
    generation_ = generation;
    scope_ = "u/" + std::to_string(generation) + "/";
    tag_ = SessionTag(options_.session + "/" + scope_);
  }

  // One update: fence, exchange, completion, barrier, ready.
  Status RunUpdate() {
    succeeded_ = false;
    const LiveReport opened = report_;
    report_ = LiveReport{};
    report_.regions = opened.regions;
    report_.plan_seconds = opened.plan_seconds;
    RESHARD_RETURN_NOT_OK(Fence());
    RESHARD_RETURN_NOT_OK(FencedBarrier());
    RESHARD_RETURN_NOT_OK(Exchange());
    RESHARD_RETURN_NOT_OK(Complete());
    RESHARD_RETURN_NOT_OK(Barrier());
    if (scope_.empty() && heartbeat_) {
      // A one-shot run is over for this rank; the others no longer watch
      // it (it voted "done").
      heartbeat_->Stop(/*remove=*/true);
    }
    Flip();
    RESHARD_RETURN_NOT_OK(Ready());
    succeeded_ = true;
    delivered_ = true;  // the base of the next delta update
    delivered_generation_ = generation_;
    return Status::OK();
  }

  // Takes `now` as this rank's bindings from the next update on. Changed
  // fragments are rebound locally: in push mode each side only ever uses
  // its own addresses, so the peers need not know. A pull session's
  // sources were registered (and their keys published) at open; a moved
  // source there is refused before any byte moves.
  Status Rebind(const LiveBindings& now) {
    RESHARD_RETURN_NOT_OK(
        SameParticipants(now.sources, bindings_.sources, "source"));
    RESHARD_RETURN_NOT_OK(
        SameParticipants(now.targets, bindings_.targets, "target"));
    bool changed = false;
    for (size_t i = 0; i < now.sources.size(); ++i) {
      if (SameBinding(now.sources[i], bindings_.sources[i])) continue;
      // One rule on one host and across hosts, whichever protocol the
      // session chose (live.h, movable_sources).
      if (!options_.movable_sources) {
        return Status::FailedPrecondition(
            "live session " + options_.session + ": source participant " +
            now.sources[i].participant_id() +
            " moved (its bindings changed since open), and the session was "
            "opened without movable_sources: keep sources in place, or open "
            "with movable_sources (push)");
      }
      changed = true;
    }
    for (size_t i = 0; i < now.targets.size(); ++i) {
      changed = changed || !SameBinding(now.targets[i], bindings_.targets[i]);
    }
    if (!changed) return Status::OK();
    Replace(now.sources, world_.sources);
    Replace(now.targets, world_.targets);
    bindings_ = now;
    RESHARD_ASSIGN_OR_RETURN(
        auto bound, BoundTransferPlan::Bind(*plan_, source_, world_.sources,
                                            target_, world_.targets));
    RESHARD_RETURN_NOT_OK(
        bound.RequireMemoryKinds({MemoryKind::kHost}, options_.exchange));
    ops_.clear();
    local_.clear();
    batches_.clear();
    bound_.emplace(std::move(bound));
    for (const BoundRegion& br : bound_->regions()) {
      RESHARD_RETURN_NOT_OK(TakeShareOf(br));
    }
    return Status::OK();
  }

  // When an update failed: operations left in flight with UCX (their
  // buffers may still be read or written).
  uint64_t abandoned_in_flight() const { return abandoned_in_flight_; }
  const std::string& scope() const { return scope_; }
  Session& records() { return records_; }

  // Records `st` as this rank's abort and returns it. When another rank
  // failed first (its death or abort explains ours, e.g. an endpoint that
  // cannot connect to it), that cause is reported.
  Status Abort(Status st) {
    if (!st.IsAborted()) {
      Status first = records_.CheckAborts();
      if (!first.ok()) st = first.WithContext(st.message());
    }
    std::string where = "live session " + options_.session + ", rank " +
                        std::to_string(options_.rank);
    if (generation_ > 0) where += ", update " + std::to_string(generation_);
    return records_.Abort(st.WithContext(where), generation_);
  }

  // Stops this rank's heartbeat and removes its record (a rank leaving
  // the session cleanly).
  void StopHeartbeat() {
    if (heartbeat_) heartbeat_->Stop(/*remove=*/true);
  }

  const LiveReport& report() const { return report_; }
  uint64_t delta_snapshot_bytes() const {
    return delta_ ? LiveDelta::SnapshotBytes(ops_) : 0;
  }

 private:
  Clock::time_point Deadline() const { return Clock::now() + options_.timeout; }
  void Stage(std::string_view stage) const {
    if (options_.on_stage) options_.on_stage(stage);
  }

  // 1. Publish: bindings, the worker's address, the remote keys (pull),
  //    then the rank record (the marker the others wait for).
  Status Publish() {
    RESHARD_ASSIGN_OR_RETURN(
        exchange_, internal::MakePeerExchange(options_.exchange,
                                              {options_.rank, options_.ucx}));
    RESHARD_ASSIGN_OR_RETURN(std::string address, exchange_->Address());
    for (size_t i = 0; i < bindings_.sources.size(); ++i) {
      RESHARD_RETURN_NOT_OK(records_.Put(
          records_.Key("bindings") + "/source-" + std::to_string(i),
          WeightRuntimeBindingToJson(bindings_.sources[i])));
    }
    for (size_t i = 0; i < bindings_.targets.size(); ++i) {
      RESHARD_RETURN_NOT_OK(records_.Put(
          records_.Key("bindings") + "/target-" + std::to_string(i),
          WeightRuntimeBindingToJson(bindings_.targets[i])));
    }
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key("address"),
                     internal::EncodeAddressRecord(options_.rank, address)));
    // Deltas are pushed (a source encodes what it sends).
    may_pull_ =
        options_.protocol == LiveProtocol::kPull ||
        (options_.protocol == LiveProtocol::kAuto && options_.ucx.tls.empty() &&
         !options_.movable_sources && !options_.delta);
    if (may_pull_ && !bindings_.sources.empty()) {
      RESHARD_RETURN_NOT_OK(RegisterSources());
    }
    if (options_.heartbeat_interval.count() > 0) {
      RESHARD_ASSIGN_OR_RETURN(
          heartbeat_,
          Heartbeat::Start(store_, options_.session + "/", options_.rank,
                           options_.heartbeat_interval));
    }
    if (!options_.target_declaration.empty()) {
      RESHARD_RETURN_NOT_OK(
          records_.Put(records_.Key("declared"), options_.target_declaration));
    }
    records_.WatchPeers();
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key("rank"),
                     internal::EncodeRankRecord(
                         {HostName(), options_.rank, options_.ranks})));
    Stage("published");
    return Status::OK();
  }

  // Pull (possibly, under kAuto): registers every source fragment and
  // publishes the keys.
  Status RegisterSources() {
    std::vector<RemoteRange> ranges;
    for (const auto& b : bindings_.sources) {
      for (const auto& f : b.fragments()) {
        const uint64_t length = std::max<uint64_t>(f.nbytes(), 1);
        RESHARD_ASSIGN_OR_RETURN(
            std::string key, exchange_->RegisterMemory(
                                 reinterpret_cast<void*>(f.address()), length));
        ranges.push_back({f.address(), length, std::move(key)});
      }
    }
    return records_.Put(records_.Key("rkeys"), internal::EncodeRemoteKeysRecord(
                                                   options_.rank, ranges));
  }

  // 2. Plan while the others publish; then read everybody's records,
  //    choose push or pull and bind the plan with everybody's bindings.
  Status PlanAndBind() {
    RESHARD_ASSIGN_OR_RETURN(auto plan,
                             LogicalTransferPlan::Make(source_, target_));
    plan_.emplace(std::move(plan));
    report_.regions = plan_->regions().size();
    const auto waiting = Clock::now();
    RESHARD_RETURN_NOT_OK(records_.WaitForAll("rank", Deadline(), nullptr));
    waited_seconds_ = Seconds(waiting);
    RESHARD_RETURN_NOT_OK(CheckDeclarations());
    RESHARD_ASSIGN_OR_RETURN(world_, ReadWorld(records_, store_, options_));
    pull_ = options_.protocol == LiveProtocol::kPull;
    if (options_.protocol == LiveProtocol::kAuto && may_pull_) {
      pull_ = true;  // when every rank runs on this host
      for (uint32_t r = 0; r < options_.ranks && pull_; ++r) {
        pull_ = world_.hosts[r] == HostName();
      }
    }
    if (options_.shadow_targets && !bindings_.targets.empty()) {
      serving_ = bindings_.targets;
      RESHARD_ASSIGN_OR_RETURN(bindings_.targets, ShadowBindings(serving_));
      Replace(bindings_.targets, world_.targets);
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto bound, BoundTransferPlan::Bind(*plan_, source_, world_.sources,
                                            target_, world_.targets));
    bound_.emplace(std::move(bound));
    // Host memory only, on every rank alike: a device pointer is never
    // handed to UCX as host memory.
    return bound_->RequireMemoryKinds({MemoryKind::kHost}, options_.exchange);
  }

  // Every other rank's target declaration, through the caller's check.
  Status CheckDeclarations() {
    if (!options_.check_target_declaration) return Status::OK();
    for (uint32_t r = 0; r < options_.ranks; ++r) {
      if (r == options_.rank) continue;
      const std::string key = records_.Key("declared", r);
      Result<std::string> text = records_.Get(key);
      std::string declaration;
      if (text.ok()) {
        declaration = std::move(*text);
      } else if (!text.status().IsNotFound()) {
        return text.status().WithContext(key);
      }
      if (declaration.size() > kMaxTargetDeclarationBytes) {
        return Status::InvalidArgument(
            key + ": a declaration of " + std::to_string(declaration.size()) +
            " bytes (at most " + std::to_string(kMaxTargetDeclarationBytes) +
            ")");
      }
      RESHARD_RETURN_NOT_OK(options_.check_target_declaration(r, declaration));
    }
    return Status::OK();
  }

  // The generation and lease recheck of this rank's own participants,
  // against the bindings current right before execution.
  Status Fence() {
    LiveBindings current = bindings_;
    if (options_.current_bindings) {
      RESHARD_ASSIGN_OR_RETURN(current, options_.current_bindings());
      if (!serving_.empty()) {
        // The targets the caller names are the serving ones; the plan
        // writes the shadows.
        RESHARD_RETURN_NOT_OK(SameServing(current.targets));
        current.targets = bindings_.targets;
      }
    }
    return bound_->CheckCurrentFor(
        ParticipantsOf(bindings_.sources), current.sources,
        ParticipantsOf(bindings_.targets), current.targets);
  }

  // Shadow mode: `targets` are still the serving bindings the shadows
  // were made for.
  Status SameServing(const std::vector<WeightRuntimeBindingManifest>& targets) {
    RESHARD_RETURN_NOT_OK(SameParticipants(targets, serving_, "target"));
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!SameBinding(targets[i], serving_[i])) {
        return Status::FailedPrecondition(
            "live session " + options_.session + ": target participant " +
            targets[i].participant_id() +
            " changed its binding without passing it to Update");
      }
    }
    return Status::OK();
  }

  // Copies of `serving` that point at this rank's shadow buffers (one per
  // placement fragment, allocated once; fragments sharing a serving range,
  // declared aliases, share a shadow), and the copies of the flip.
  Result<std::vector<WeightRuntimeBindingManifest>> ShadowBindings(
      const std::vector<WeightRuntimeBindingManifest>& serving) {
    std::vector<WeightRuntimeBindingManifest> out;
    flips_.clear();
    std::map<std::pair<uint64_t, uint64_t>, uint8_t*> by_range;
    for (const auto& b : serving) {
      std::vector<RuntimeBindingFragment> fragments;
      for (const auto& f : b.fragments()) {
        const auto range = std::make_pair(f.address(), f.nbytes());
        uint8_t*& shadow = by_range[range];
        if (shadow == nullptr) {
          auto& owned = shadows_[f.placement_fragment_id()];
          if (owned == nullptr) {
            owned = std::make_unique<uint8_t[]>(f.nbytes());
          }
          shadow = owned.get();
          flips_.push_back(
              {reinterpret_cast<uint8_t*>(f.address()), shadow, f.nbytes()});
        }
        RuntimeBindingFragmentSpec spec = internal::SpecOf(f);
        spec.runtime_fragment_id += ":shadow";
        spec.address = spec.storage_address =
            reinterpret_cast<uint64_t>(shadow);
        spec.storage_nbytes = f.nbytes();
        spec.storage_offset_bytes = 0;
        RESHARD_ASSIGN_OR_RETURN(auto fragment,
                                 RuntimeBindingFragment::Make(std::move(spec)));
        fragments.push_back(std::move(fragment));
      }
      WeightRuntimeBindingManifestSpec spec{
          b.resource_id(), b.placement_id(),   b.placement_digest(),
          b.instance_id(), b.generation(),     b.lease_id(),
          b.revision(),    b.participant_id(), std::move(fragments)};
      RESHARD_ASSIGN_OR_RETURN(
          auto shadowed, WeightRuntimeBindingManifest::Make(std::move(spec)));
      out.push_back(std::move(shadowed));
    }
    return out;
  }

  // Shadow mode, after the world barrier: the update becomes visible.
  void Flip() {
    for (const ShadowCopy& f : flips_)
      std::memcpy(f.serving, f.shadow, f.bytes);
  }

  // 3. Connect: this rank's share of the regions, with an endpoint per
  //    peer it exchanges with, wired up before any transfer.
  Status Connect() {
    for (const BoundRegion& br : bound_->regions()) {
      RESHARD_RETURN_NOT_OK(TakeShareOf(br));
    }
    RESHARD_RETURN_NOT_OK(
        exchange_->WireUp(Deadline(), [&] { return records_.CheckPeers(); }));
    // Plan, bind, fence and connect; not the wait for the others to publish.
    report_.plan_seconds = Seconds(start_) - waited_seconds_;
    return Status::OK();
  }

  // What this rank does with `br`: copy it (both ends here), send it, or
  // receive or read it; nothing when neither end is here. Small pushed
  // regions join the open batch of their peer and direction (both ends
  // walk the regions in plan order, so they form the same batches).
  Status TakeShareOf(const BoundRegion& br) {
    const TransferRegion& lr = plan_->regions()[br.region];
    // Bind proved every participant published; a miss is a bug.
    const auto from_it = world_.source_rank.find(
        plan_->source_fragments()[lr.source_fragment].participant_id);
    const auto to_it = world_.target_rank.find(
        plan_->target_fragments()[lr.target_fragment].participant_id);
    if (from_it == world_.source_rank.end() ||
        to_it == world_.target_rank.end()) {
      return Status::Internal("live plan names an unpublished participant");
    }
    const uint32_t from = from_it->second;
    const uint32_t to = to_it->second;
    using Kind = internal::ExchangeOp::Kind;
    const bool small = br.bytes <= internal::kMaxCoalescedRegion;
    const bool pulled = pull_ && !small && internal::PulledRegion(br);
    if (from == options_.rank && to == options_.rank) {
      local_.push_back(&br);
    } else if (from == options_.rank) {
      RESHARD_RETURN_NOT_OK(Peer(to));
      if (!pulled) AddMessage(br, to, Kind::kSend, small);
    } else if (to == options_.rank) {
      RESHARD_RETURN_NOT_OK(Peer(from));
      if (!pulled) {
        AddMessage(br, from, Kind::kReceive, small);
      } else {
        RESHARD_ASSIGN_OR_RETURN(uint64_t key, RemoteKey(from, br));
        ops_.push_back({&br, {}, from, Kind::kGet, key});
      }
    }
    return Status::OK();
  }

  // A message of its own, or a place in the peer's open batch of small
  // regions (a new batch once it would exceed kMaxCoalescedBytes).
  void AddMessage(const BoundRegion& br, uint32_t peer,
                  internal::ExchangeOp::Kind kind, bool small) {
    if (!small) {
      ops_.push_back({&br, {}, peer, kind});
      return;
    }
    const auto key = std::make_pair(peer, static_cast<int>(kind));
    auto it = batches_.find(key);
    if (it != batches_.end() &&
        it->second.second + br.bytes <= internal::kMaxCoalescedBytes) {
      ops_[it->second.first].more.push_back(&br);
      it->second.second += br.bytes;
      return;
    }
    batches_[key] = {ops_.size(), br.bytes};
    ops_.push_back({&br, {}, peer, kind});
  }

  // Connects to rank `r` on first use.
  Status Peer(uint32_t r) {
    return exchange_->Connect(r, world_.addresses[r], RankName(r, world_));
  }

  // Pull: rank `r`'s key for the registered range holding `br`'s source,
  // read from its record once and unpacked once per range.
  Result<uint64_t> RemoteKey(uint32_t r, const BoundRegion& br) {
    auto it = ranges_.find(r);
    if (it == ranges_.end()) {
      const std::string key = records_.Key("rkeys", r);
      RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
      RESHARD_ASSIGN_OR_RETURN(auto decoded,
                               internal::DecodeRemoteKeysRecord(text, key, r));
      it = ranges_.emplace(r, std::move(decoded)).first;
    }
    const auto& list = it->second;
    auto at = std::upper_bound(
        list.begin(), list.end(), br.source_address,
        [](uint64_t a, const RemoteRange& x) { return a < x.address; });
    if (at == list.begin() ||
        br.source_address + 1 >
            std::prev(at)->address + std::prev(at)->length) {
      return Status::InvalidArgument("region " + std::to_string(br.region) +
                                     ": rank " + std::to_string(r) +
                                     " published no remote key for its source");
    }
    const size_t index = static_cast<size_t>(std::prev(at) - list.begin());
    auto u = unpacked_.find(std::make_pair(r, index));
    if (u == unpacked_.end()) {
      RESHARD_ASSIGN_OR_RETURN(
          uint64_t key, exchange_->ImportRemoteKey(r, list[index].packed));
      u = unpacked_.emplace(std::make_pair(r, index), key).first;
    }
    return u->second;
  }

  // 4. Exchange: local copies first (they need no peer), then the sends,
  //    receives and gets.
  Status Exchange() {
    const auto t0 = Clock::now();
    internal::ExchangeOptions xo;
    xo.session_tag = tag_;
    xo.max_in_flight = options_.max_in_flight;
    xo.deadline = Deadline();
    xo.poll_abort = [&] { return records_.CheckPeers(); };
    xo.on_first_completion = [&] { Stage("transfer"); };
    for (const BoundRegion* br : local_) {
      internal::CopyRegionSegments(*br, 0, internal::RowCount(*br));
      report_.bytes_received += br->bytes;
    }
    report_.local_operations = local_.size();
    internal::ExchangeStats stats;
    Status exchanged = RunOps(xo, &stats);
    abandoned_in_flight_ = stats.abandoned_in_flight;
    RESHARD_RETURN_NOT_OK(exchanged);
    uint64_t regions_in = 0, bytes_in = 0;
    for (const auto& op : ops_) {
      if (op.kind != internal::ExchangeOp::Kind::kSend) {
        regions_in += 1 + op.more.size();
        bytes_in += op.bytes();
      }
    }
    report_.operations = local_.size() + regions_in;
    report_.coalesced_regions = stats.coalesced_regions;
    report_.messages_sent = stats.messages_sent;
    report_.gets = stats.gets;
    report_.packed_messages = stats.packed_messages;
    report_.bytes_sent = stats.bytes_sent;
    // A delta update brings every region up to date with fewer bytes.
    report_.bytes_received += delta_ ? bytes_in : stats.bytes_received;
    report_.wire_bytes += stats.bytes_received;
    report_.transfer_seconds = Seconds(t0);
    return Status::OK();
  }

  // This rank's operations: in full, or (delta, after a delivered update)
  // as the changes since it; a full update of a delta session snapshots
  // what it sent.
  Status RunOps(const internal::ExchangeOptions& xo,
                internal::ExchangeStats* stats) {
    if (!delta_ || !delivered_) {
      Status st = exchange_->Run(ops_, xo, stats);
      if (st.ok() && delta_) st = delta_->Snapshot(ops_);
      return st;
    }
    internal::ExchangeOptions base_round = xo;
    base_round.session_tag =
        SessionTag(options_.session + "/" + scope_ + "base");
    base_round.on_first_completion = nullptr;
    Status st = delta_->Run(*exchange_, ops_, base_round, xo,
                            delivered_generation_, &report_, stats);
    if (!st.ok() && stats->abandoned_in_flight > 0) delta_->Abandon();
    return st;
  }

  // Standing sessions: every rank's fence passed before anybody posts an
  // operation, so a rank that refuses an update (a stale or moved binding,
  // refused tensors) fails it for everybody with nothing in flight.
  Status FencedBarrier() {
    if (scope_.empty()) return Status::OK();
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key(scope_ + "fenced"),
                     internal::EncodeMarkerRecord(options_.rank)));
    const auto t0 = Clock::now();
    Status all =
        records_.WaitForAll(scope_ + "fenced", Deadline(), [&]() -> Status {
          RESHARD_RETURN_NOT_OK(exchange_->PeerFailure());
          exchange_->Progress(std::chrono::microseconds(200));
          return Status::OK();
        });
    report_.arrival_seconds = Seconds(t0);
    return all;
  }

  // 5. Completion: the caller's validator, then "done".
  Status Complete() {
    Stage("completing");
    if (options_.validate_targets) {
      const auto t0 = Clock::now();
      Status valid = options_.validate_targets();
      report_.validate_seconds = Seconds(t0);
      RESHARD_RETURN_NOT_OK(valid);
    }
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key(scope_ + "done"),
                     internal::EncodeMarkerRecord(options_.rank)));
    Stage("done");
    return Status::OK();
  }

  // 6. World barrier: the update's outcome, the same on every rank that
  //    gets here. The first rank that can tell records it create-only
  //    (outcome/0): commit once every rank voted "done"; abort when a rank
  //    failed before voting (its abort record), fell silent before voting
  //    (heartbeat.h), published a malformed vote, or the deadline passed.
  //    Every rank follows the recorded outcome, so an update never
  //    succeeds on some ranks and fails on others (a failure noticed after
  //    the commit, such as a peer that left after voting, does not undo
  //    it). Still progressing meanwhile: peers may still read from us.
  Status Barrier() {
    const auto t1 = Clock::now();
    const std::string done = scope_ + "done";
    const std::string decision = records_.Key(scope_ + "outcome", 0);
    const auto deadline = Deadline();
    const auto voted = records_.Having(done);
    auto sleep = std::chrono::microseconds(200);
    while (true) {
      auto recorded = records_.Get(decision);
      if (recorded.ok()) return Follow(*recorded, decision, t1);
      if (!recorded.status().IsNotFound()) return recorded.status();
      RESHARD_ASSIGN_OR_RETURN(auto keys, records_.List(done));
      Status failed = Status::OK();
      if (keys.size() >= options_.ranks) {
        failed = CheckVotes(done);
        if (failed.ok()) {
          RESHARD_RETURN_NOT_OK(Decide({true, options_.rank, ""}, decision));
          continue;
        }
      }
      if (failed.ok()) failed = records_.CheckPeers(voted);
      if (failed.ok() && Clock::now() >= deadline) {
        std::string missing;
        for (uint32_t r = 0; r < options_.ranks; ++r) {
          if (!voted(r)) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          }
        }
        failed = Status::Unavailable(
            "live session " + options_.session + ": timed out after " +
            std::to_string(options_.timeout.count()) + " ms waiting for " +
            done + " of rank(s) " + missing);
      }
      if (!failed.ok()) {
        RESHARD_RETURN_NOT_OK(
            Decide({false, options_.rank, failed.ToString()}, decision));
        auto now = records_.Get(decision);
        if (now.ok()) {
          auto o =
              internal::DecodeOutcomeRecord(*now, decision, options_.ranks);
          // Ours was recorded: the failure as this rank saw it.
          if (o.ok() && !o->commit && o->decided_by == options_.rank) {
            report_.barrier_seconds = Seconds(t1);
            return failed;
          }
        }
        continue;
      }
      exchange_->Progress(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
    }
  }

  // Every vote of `done` is a well-formed marker of its rank.
  Status CheckVotes(const std::string& done) {
    for (uint32_t r = 0; r < options_.ranks; ++r) {
      const std::string key = records_.Key(done, r);
      RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
      RESHARD_RETURN_NOT_OK(internal::DecodeMarkerRecord(text, key, r));
    }
    return Status::OK();
  }

  // Records `outcome` unless another rank recorded one first.
  Status Decide(const internal::OutcomeRecord& outcome,
                const std::string& decision) {
    const Status put =
        records_.Put(decision, internal::EncodeOutcomeRecord(outcome));
    return put.IsAlreadyExists() ? Status::OK() : put;
  }

  // The recorded outcome as this rank's result.
  Status Follow(const std::string& text, const std::string& decision,
                Clock::time_point since) {
    RESHARD_ASSIGN_OR_RETURN(auto outcome, internal::DecodeOutcomeRecord(
                                               text, decision, options_.ranks));
    report_.barrier_seconds = Seconds(since);
    if (outcome.commit) return Status::OK();
    return Status::Aborted(
        "live session " + options_.session + " failed as decided by rank " +
        std::to_string(outcome.decided_by) + ": " + outcome.reason);
  }

  // 7. Ready: target ranks record activation-ready.
  Status Ready() {
    if (bindings_.targets.empty()) return Status::OK();
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key(scope_ + "ready"),
                     internal::EncodeMarkerRecord(options_.rank)));
    report_.ready = true;
    return Status::OK();
  }

  Session records_;
  RecordStore& store_;
  const WeightPlacementManifest& source_;
  const WeightPlacementManifest& target_;
  LiveBindings bindings_;  // this rank's, as of the last (re)bind
  const LiveSessionOptions& options_;
  LiveReport report_;
  // Records of the current update: "" for a one-shot run (done/<r>,
  // ready/<r>), "u/<generation>/" in a standing session.
  std::string scope_;
  uint64_t generation_ = 0;  // of the current update; 0 outside updates
  std::unique_ptr<Heartbeat> heartbeat_;
  uint32_t tag_ = 0;  // high 32 bits of this update's message tags
  Clock::time_point start_;
  double waited_seconds_ = 0;  // for the others to publish
  bool may_pull_ = false;      // by the options (before the world is known)
  bool pull_ = false;          // decided with the world's hosts
  bool succeeded_ = false;
  uint64_t abandoned_in_flight_ = 0;
  // Shadow mode: the caller's target bindings, the shadows by placement
  // fragment id, and the serving <- shadow copies of the flip.
  struct ShadowCopy {
    uint8_t* serving;
    const uint8_t* shadow;
    uint64_t bytes;
  };
  std::vector<WeightRuntimeBindingManifest> serving_;
  std::map<std::string, std::unique_ptr<uint8_t[]>> shadows_;
  std::vector<ShadowCopy> flips_;
  std::unique_ptr<internal::PeerExchange> exchange_;
  // delta: the snapshots and encodings; whether an update was delivered
  // (the next one sends deltas on its generation).
  std::optional<LiveDelta> delta_;
  bool delivered_ = false;
  uint64_t delivered_generation_ = 0;
  // The plan and this rank's share of it.
  std::optional<LogicalTransferPlan> plan_;
  std::optional<BoundTransferPlan> bound_;
  World world_;
  std::map<uint32_t, std::vector<RemoteRange>> ranges_;  // pull, by rank
  // Pull: imported keys by (rank, index of its range).
  std::map<std::pair<uint32_t, size_t>, uint64_t> unpacked_;
  std::vector<internal::ExchangeOp> ops_;
  std::vector<const BoundRegion*> local_;
  // Open batch of small regions per (peer, direction): op index, bytes.
  std::map<std::pair<uint32_t, int>, std::pair<size_t, uint64_t>> batches_;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_RANK_H_
