// LiveRank's lifecycle (live_rank.h): a one-shot run, a standing
// session's opening and updates, a rebind, the fence and an abort.
#include "live/live_rank.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>

#include "exec_cuda/fragment_staging.h"

namespace reshard::live_internal {

LiveRank::~LiveRank() {
  if (heartbeat_) heartbeat_->Stop(/*remove=*/false);
  if (!succeeded_ && wired_ && exchange_) exchange_->Abandon();
}

Status LiveRank::RefuseRejoin() {
  const std::string& session = options_.session;
  RESHARD_ASSIGN_OR_RETURN(auto own, records_.OwnRecords());
  if (own.empty()) return Status::OK();
  return Status::AlreadyExists("live session " + session + ": rank " +
                               std::to_string(options_.rank) + " already has " +
                               std::to_string(own.size()) + " record(s) (" +
                               own[0] + (own.size() > 1 ? ", ..." : "") +
                               ") from an earlier run; use a new session key");
}

Status LiveRank::Run() {
  start_ = Clock::now();
  tag_ = SessionTag(options_.session);
  RESHARD_RETURN_NOT_OK(Publish());
  RESHARD_RETURN_NOT_OK(PlanAndBind());
  RESHARD_RETURN_NOT_OK(Connect());
  return RunUpdate();
}

Status LiveRank::Open() {
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

Status LiveRank::BeginUpdate(uint64_t generation, std::string tag,
                             std::optional<uint64_t> attempt) {
  generation_ = generation;
  certain_ = false;
  followed_failure_ = false;
  tag_text_ = std::move(tag);
  for (uint64_t a = attempt.value_or(0);; ++a) {
    scope_ = "u/" + std::to_string(generation) +
             (a == 0 ? "" : "r" + std::to_string(a)) + "/";
    attempt_ = a;
    if (attempt.has_value()) break;
    const std::string decision = records_.Key(scope_ + "outcome", 0);
    auto recorded = records_.Get(decision);
    if (recorded.status().IsNotFound()) break;
    RESHARD_RETURN_NOT_OK(recorded.status());
    RESHARD_ASSIGN_OR_RETURN(
        auto outcome,
        internal::DecodeOutcomeRecord(*recorded, decision, options_.ranks));
    if (outcome.commit) {
      return Status::FailedPrecondition(
          "live session " + options_.session + ": update " +
          std::to_string(generation) + " succeeded already (" + decision + ")");
    }
  }
  tag_ = SessionTag(options_.session + "/" + scope_);
  return Status::OK();
}

Status LiveRank::TakeSeat() {
  RESHARD_ASSIGN_OR_RETURN(auto own, records_.OwnRecords());
  const std::string prefix = options_.session + "/";
  const std::string beats =
      prefix + "alive/" + std::to_string(options_.rank) + "/";
  uint64_t last_beat = 0;
  for (const std::string& key : own) {
    // Updates' records stay: they tell every rank which try of a
    // generation comes next.
    if (key.compare(prefix.size(), 2, "u/") == 0) continue;
    if (key.starts_with(beats)) {
      last_beat = std::max<uint64_t>(
          last_beat, std::strtoull(key.c_str() + beats.size(), nullptr, 10));
    }
    RESHARD_RETURN_NOT_OK(store_.Delete(key));
  }
  // Above every beat the watchers saw of the earlier process (one that
  // left cleanly removed its last; the clock's milliseconds are above any
  // counter that started at 1).
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  first_beat_ = std::max<uint64_t>(last_beat + 1, wall.count());
  // Any value but the earlier process's: peers compare them for equality.
  std::random_device random;
  do {
    incarnation_ =
        (uint64_t{random()} << 32) ^ random() ^
        static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  } while (incarnation_ == 0);
  return Status::OK();
}
Status LiveRank::RunUpdate() {
  succeeded_ = false;
  const LiveReport opened = report_;
  report_ = LiveReport{};
  report_.regions = opened.regions;
  report_.plan_seconds = opened.plan_seconds;
  if (scope_.empty()) {
    // A one-shot run: any failure ends it.
    if (mirrors_) RESHARD_RETURN_NOT_OK(mirrors_->SourcesToHost());
    RESHARD_RETURN_NOT_OK(Fence());
    RESHARD_RETURN_NOT_OK(Exchange());
    RESHARD_RETURN_NOT_OK(Verify());
    RESHARD_RETURN_NOT_OK(Complete());
    RESHARD_RETURN_NOT_OK(Barrier());
    // Over for this rank; the others no longer watch it (it voted).
    if (heartbeat_) heartbeat_->Stop(/*remove=*/true);
  } else {
    // Before the fenced barrier passes nothing is posted anywhere, and
    // after this rank's exchange and verification nothing of it is in
    // flight: a failure there leaves the session usable (FailUpdate). One
    // in the exchange ends it (it may leave operations in flight).
    Status st = mirrors_ ? mirrors_->SourcesToHost() : Status::OK();
    if (st.ok()) st = Fence();
    if (st.ok()) st = FencedBarrier();
    // A rank that closed the session ends it.
    if (!st.ok()) return records_.saw_close() ? st : FailUpdate(std::move(st));
    RESHARD_RETURN_NOT_OK(Exchange());
    st = Verify();
    if (st.ok()) st = Complete();
    if (!st.ok()) {
      return abandoned_in_flight_ > 0 ? st : FailUpdate(std::move(st));
    }
    st = Barrier();
    if (!st.ok()) {
      // This rank voted: nothing of it is in flight.
      delivered_ = false;
      Status settled = Settle();
      return settled.ok() ? st : st.WithContext(settled.message());
    }
  }
  RESHARD_RETURN_NOT_OK(shadow_.Flip());
  // The update succeeded everywhere: CUDA targets take their mirrors.
  if (mirrors_) RESHARD_RETURN_NOT_OK(mirrors_->TargetsToDevice());
  RESHARD_RETURN_NOT_OK(Ready());
  succeeded_ = true;
  delivered_ = true;  // the base of the next delta update
  delivered_generation_ = generation_;
  return Status::OK();
}

Status LiveRank::Rebind(const LiveBindings& given) {
  RESHARD_ASSIGN_OR_RETURN(const LiveBindings now,
                           Mirrored(given, /*adopt=*/true));
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
  // Only the bindings that moved are checked again.
  RESHARD_ASSIGN_OR_RETURN(
      auto bound,
      bound_->Rebind(*plan_, source_, world_.sources, target_, world_.targets));
  return Reshare(std::move(bound));
}

Status LiveRank::Reshare(BoundTransferPlan bound) {
  RESHARD_RETURN_NOT_OK(StageDeviceRegions());
  RESHARD_RETURN_NOT_OK(bound.RequireMemoryKinds(
      exchange_->capabilities().memory_kinds, options_.exchange));
  ops_.clear();
  local_.clear();
  batches_.clear();
  if (verify_) verify_->Clear();
  bound_.emplace(std::move(bound));
  if (device_) RESHARD_RETURN_NOT_OK(device_->Classify(bound_->regions()));
  if (verify_) verify_->UseDevice(device_.get());
  for (const BoundRegion& br : bound_->regions()) {
    RESHARD_RETURN_NOT_OK(TakeShareOf(br));
  }
  return Status::OK();
}

Status LiveRank::Reconnect(uint32_t r) {
  RESHARD_RETURN_NOT_OK(exchange_->Disconnect(r));
  records_.ForgetPeer(r);
  connected_.erase(r);
  ranges_.erase(r);
  std::erase_if(unpacked_, [r](const auto& e) { return e.first.first == r; });
  RESHARD_ASSIGN_OR_RETURN(World w, ReadWorld(records_, store_, options_));
  // This rank's own bindings as bound (its shadows in shadow mode).
  Replace(bindings_.sources, w.sources);
  Replace(bindings_.targets, w.targets);
  world_ = std::move(w);
  RESHARD_ASSIGN_OR_RETURN(
      auto bound,
      bound_->Rebind(*plan_, source_, world_.sources, target_, world_.targets));
  RESHARD_RETURN_NOT_OK(Reshare(std::move(bound)));
  RESHARD_RETURN_NOT_OK(
      exchange_->WireUp(Deadline(), [&] { return records_.CheckPeers(); }));
  ++rejoins_;
  return Status::OK();
}

Status LiveRank::Abort(Status st, bool final) {
  if (!st.IsAborted()) {
    Status first = records_.CheckAborts();
    if (!first.ok()) st = first.WithContext(st.message());
  }
  return records_.Abort(st.WithContext(Where()), generation_, final);
}

std::string LiveRank::Where() const {
  std::string where = "live session " + options_.session + ", rank " +
                      std::to_string(options_.rank);
  if (generation_ > 0) where += ", update " + std::to_string(generation_);
  return where;
}

void LiveRank::StopHeartbeat() {
  if (heartbeat_) heartbeat_->Stop(/*remove=*/true);
}

void LiveRank::ReleaseExchange() {
  if (!succeeded_ && wired_ && exchange_) exchange_->Abandon();
  exchange_.reset();
}

LiveVersion LiveRank::version() const {
  return {generation_, source_.placement_id(), agreed_tag_, digest_};
}

uint64_t LiveRank::delta_snapshot_bytes() const {
  return delta_ ? LiveDelta::SnapshotBytes(ops_) : 0;
}

Status LiveRank::Fence() {
  LiveBindings current = bindings_;
  if (options_.current_bindings) {
    RESHARD_ASSIGN_OR_RETURN(current, options_.current_bindings());
    RESHARD_ASSIGN_OR_RETURN(current, Mirrored(current, /*adopt=*/false));
    if (shadow_.active()) {
      // The targets the caller names are the serving ones; the plan
      // writes the shadows.
      RESHARD_RETURN_NOT_OK(shadow_.SameServing(current.targets));
      current.targets = bindings_.targets;
    }
  }
  return bound_->CheckCurrentFor(
      ParticipantsOf(bindings_.sources), current.sources,
      ParticipantsOf(bindings_.targets), current.targets);
}

Result<LiveBindings> LiveRank::Mirrored(const LiveBindings& b, bool adopt) {
  if (!mirrors_) {
    if (!adopt || exchange_ == nullptr) return b;
    if (!HasCudaFragment(b.sources) && !HasCudaFragment(b.targets)) return b;
    const auto& kinds = exchange_->capabilities().memory_kinds;
    if (std::find(kinds.begin(), kinds.end(), MemoryKind::kCuda) !=
        kinds.end()) {
      // The exchange moves the device memory itself.
      RESHARD_RETURN_NOT_OK(DirectDevice(b));
      return b;
    }
    if (PipelineStaging()) {
      // It will, staged (StageDeviceRegions), where a CUDA executor is.
      RESHARD_RETURN_NOT_OK(RequireStagingExecutor(b));
      RESHARD_RETURN_NOT_OK(DirectDevice(b));
      return b;
    }
    auto api = cuda::StagingDeviceApi(options_.device_api);
    // No CUDA executor: the bound plan refuses the fragment, as before.
    if (!api.ok()) return b;
    mirrors_ = std::make_unique<DeviceMirrors>(options_.session,
                                               std::move(api).ValueOrDie(),
                                               options_.device_staging_bytes);
  }
  LiveBindings out = b;
  RESHARD_ASSIGN_OR_RETURN(
      out.sources, mirrors_->Mirror(b.sources, source_, "source", adopt));
  RESHARD_ASSIGN_OR_RETURN(
      out.targets, mirrors_->Mirror(b.targets, target_, "target", adopt));
  // The mirrors are other memory than the proof was made for.
  if (HasCudaFragment(b.sources)) out.checked_sources.reset();
  if (HasCudaFragment(b.targets)) out.checked_targets.reset();
  return out;
}

}  // namespace reshard::live_internal
