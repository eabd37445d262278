// LiveSession: a standing session (live.h) on top of one LiveRank: open
// once, update many times, close; RemoveLiveSession.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "live/live_conversion.h"
#include "live/live_rank.h"
#include "live/live_records.h"
#include "reshard/live.h"

namespace reshard {

using live_internal::Clock;
using live_internal::LiveConversion;
using live_internal::LiveRank;
using live_internal::LiveWire;
using live_internal::MakeLiveWire;
using live_internal::Seconds;
using live_internal::SessionRecords;
using live_internal::ValidateOptions;

struct LiveSession::Impl {
  Impl(RecordStore& store, std::unique_ptr<LiveWire> w)
      : store(store),
        wire(std::move(w)),
        options(wire->options),
        rank(store, wire->wire_source(), wire->wire_target(), wire->bindings,
             wire->options) {}

  // Every rank is past "closed" (its marker, or its rank record already
  // removed by its own Close).
  Status WaitClosed() {
    const auto deadline = Clock::now() + options.timeout;
    SessionRecords& s = rank.records();
    while (true) {
      std::string missing;
      for (uint32_t r = 0; r < options.ranks; ++r) {
        if (s.Get(s.Key("closed", r)).ok()) continue;
        if (s.Get(s.Key("rank", r)).status().IsNotFound()) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (missing.empty()) return Status::OK();
      // A rank that failed or died never closes: stop waiting for it.
      RESHARD_RETURN_NOT_OK(s.CheckPeers([&](uint32_t r) {
        return s.Get(s.Key("closed", r)).ok() ||
               s.Get(s.Key("rank", r)).status().IsNotFound();
      }));
      if (Clock::now() >= deadline) {
        return Status::Unavailable(
            "live session " + options.session + ": timed out after " +
            std::to_string(options.timeout.count()) +
            " ms waiting for rank(s) " + missing + " to close");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Removes this rank's records: updates, bindings and keys first, the
  // rank record and the closed marker last (peers take either as closed).
  Status RemoveOwn() {
    rank.StopHeartbeat();
    RESHARD_ASSIGN_OR_RETURN(auto own, rank.records().OwnRecords());
    SessionRecords& s = rank.records();
    const std::string rank_key = s.Key("rank");
    const std::string closed_key = s.Key("closed");
    for (const std::string& key : own) {
      if (key == rank_key || key == closed_key) continue;
      RESHARD_RETURN_NOT_OK(store.Delete(key));
    }
    RESHARD_RETURN_NOT_OK(store.Delete(rank_key));
    return store.Delete(closed_key);
  }

  // The arguments of an update, before anything is recorded.
  Status CheckUpdate(const std::string& name, uint64_t generation,
                     std::string_view tag) const {
    if (closed) return Status::FailedPrecondition(name + " is closed");
    if (over) {
      return Status::FailedPrecondition(
          name + (outcome == LiveOutcome::kUncertain
                      ? " left operations of this rank in flight in an "
                        "earlier update; this rank must rejoin (a new "
                        "process opening with rejoin)"
                      : " ended in an earlier update; open a new session"));
    }
    if (updated && generation <= last_generation) {
      return Status::InvalidArgument(name + ": update generation " +
                                     std::to_string(generation) +
                                     " is not above the previous update's " +
                                     std::to_string(last_generation));
    }
    Status checked = internal::CheckVersionTag(tag);
    if (!checked.ok()) return checked.WithContext(name);
    return Status::OK();
  }

  // Rebind, quantize, the update, the conversion of shadow targets.
  Status Run(const LiveBindings* bindings, LiveUpdateReport* out) {
    LiveConversion* conversion = wire->conversion.get();
    Status st = Status::OK();
    if (bindings != nullptr) {
      if (conversion == nullptr) {
        st = rank.Rebind(*bindings);
      } else {
        auto wired = conversion->Translate(*bindings, /*adopt=*/true);
        st = wired.ok() ? rank.Rebind(*wired) : wired.status();
      }
      out->rebound = st.ok();
    }
    if (st.ok() && conversion != nullptr) {
      st = conversion->Quantize(wire->threads);
    }
    if (!st.ok()) return rank.FailUpdate(std::move(st));
    st = rank.RunUpdate();
    if (st.ok() && conversion != nullptr && options.shadow_targets) {
      // The flip wrote the staging buffers; the targets convert from them.
      st = conversion->Apply(wire->threads);
    }
    return st;
  }

  // A failed update: the session goes on when it failed alike everywhere
  // with nothing in flight (LiveRank::failed_certainly), else it is over
  // for this rank and its failure is recorded for the others.
  Status Failed(Status st) {
    stale_scopes.push_back(rank.scope());
    if (rank.failed_certainly()) {
      outcome = LiveOutcome::kFailed;
      return Status(st.code(),
                    st.message() +
                        " (the session stays open: retry the update or run "
                        "the next one)");
    }
    over = true;
    outcome = rank.abandoned_in_flight() > 0 ? LiveOutcome::kUncertain
                                             : LiveOutcome::kFailed;
    Status recorded = rank.Abort(std::move(st));
    if (outcome == LiveOutcome::kUncertain) {
      recorded = recorded.WithContext(
          "outcome uncertain (" + std::to_string(rank.abandoned_in_flight()) +
          " operation(s) in flight: do not free or reuse this rank's buffers; "
          "rank " +
          std::to_string(options.rank) +
          " must rejoin, a new process opening with rejoin)");
    }
    return recorded;
  }

  // This rank's records of earlier updates (each rank removes its own;
  // rank 0 the outcome records).
  void RemoveScopes() {
    SessionRecords& s = rank.records();
    for (const std::string& scope : stale_scopes) {
      for (const char* kind :
           {"fenced", "done", "failed", "ready", "outcome"}) {
        (void)store.Delete(s.Key(scope + kind));
      }
    }
    stale_scopes.clear();
  }

  // The version the targets now hold: the record version/<r> replaced,
  // then the caller's callback.
  Status Publish() {
    version = rank.version();
    if (wire->bindings.targets.empty()) return Status::OK();
    SessionRecords& s = rank.records();
    const std::string key = s.Key("version");
    RESHARD_RETURN_NOT_OK(store.Delete(key));
    RESHARD_RETURN_NOT_OK(store.Put(
        key, internal::EncodeVersionRecord({options.rank, *version})));
    if (options.on_version) options.on_version(*version);
    return Status::OK();
  }

  RecordStore& store;
  std::unique_ptr<LiveWire> wire;  // placements, bindings, conversions
  const LiveSessionOptions& options;
  LiveRank rank;
  LiveOutcome outcome = LiveOutcome::kOk;
  bool closed = false;
  // Set when the session can no longer be updated (an update left
  // operations in flight or ended it, or Abort).
  bool over = false;
  uint64_t last_generation = 0;
  bool updated = false;
  // Scopes of ended updates, removed after the next success (every rank
  // is then past their barriers).
  std::vector<std::string> stale_scopes;
  std::optional<LiveVersion> version;
  uint64_t updates = 0;  // successful ones, recorded when closing
  double open_seconds = 0;
  // Set while an Update runs: a second concurrent caller is refused.
  std::atomic<bool> in_update{false};
};

namespace {

// An update's counters and times from its rank's report.
void CopyCounters(const LiveReport& r, LiveUpdateReport* out) {
  out->operations = r.operations;
  out->local_operations = r.local_operations;
  out->messages_sent = r.messages_sent;
  out->gets = r.gets;
  out->m2n_tensors = r.m2n_tensors;
  out->packed_messages = r.packed_messages;
  out->coalesced_regions = r.coalesced_regions;
  out->bytes_sent = r.bytes_sent;
  out->bytes_received = r.bytes_received;
  out->wire_bytes = r.wire_bytes;
  out->transfer_seconds = r.transfer_seconds;
  out->barrier_seconds = r.barrier_seconds;
  out->validate_seconds = r.validate_seconds;
  out->arrival_seconds = r.arrival_seconds;
  out->delta_regions = r.delta_regions;
  out->full_regions = r.full_regions;
  out->encode_seconds = r.encode_seconds;
  out->apply_seconds = r.apply_seconds;
  out->peers = r.peers;
  out->ready = r.ready;
  out->verified_regions = r.verified_regions;
  out->verify_seconds = r.verify_seconds;
}

}  // namespace

LiveSession::LiveSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LiveSession::~LiveSession() {
  if (impl_ != nullptr && !impl_->closed && !impl_->over) (void)Close();
}

Result<std::unique_ptr<LiveSession>> LiveSession::Open(
    RecordStore& rendezvous, WeightPlacementManifest source,
    WeightPlacementManifest target, LiveBindings bindings,
    LiveSessionOptions options) {
  RESHARD_RETURN_NOT_OK(ValidateOptions(options));
  const auto t0 = Clock::now();
  const std::string session = options.session;
  const uint32_t rank = options.rank;
  auto made = MakeLiveWire(std::move(source), std::move(target),
                           std::move(bindings), std::move(options));
  if (!made.ok()) {
    // Refused before publishing: the others stop at once, naming this rank.
    (void)AbortLiveSession(rendezvous, session, rank, made.status());
    return made.status();
  }
  auto wire = std::move(made).ValueOrDie();
  auto impl = std::make_unique<Impl>(rendezvous, std::move(wire));
  RESHARD_RETURN_NOT_OK(impl->options.rejoin ? impl->rank.TakeSeat()
                                             : impl->rank.RefuseRejoin());
  if (Status st = impl->rank.Open(); !st.ok()) {
    impl->outcome = LiveOutcome::kFailed;
    impl->over = true;
    return impl->rank.Abort(std::move(st));
  }
  impl->open_seconds = Seconds(t0);
  return std::unique_ptr<LiveSession>(new LiveSession(std::move(impl)));
}

Result<LiveUpdateReport> LiveSession::Update(uint64_t generation,
                                             const LiveBindings* bindings,
                                             std::string_view tag) {
  Impl& m = *impl_;
  const std::string name = "live session " + m.options.session;
  if (m.in_update.exchange(true)) {
    return Status::FailedPrecondition(
        name +
        ": an update is already running in another thread; updates "
        "of one session are sequential");
  }
  struct Clear {
    std::atomic<bool>& flag;
    ~Clear() { flag = false; }
  } clear{m.in_update};
  RESHARD_RETURN_NOT_OK(m.CheckUpdate(name, generation, tag));
  const auto t0 = Clock::now();
  LiveUpdateReport out;
  out.generation = generation;
  // Every rank takes part in every try of a generation (the next after a
  // failed one of the same generation); a rank that rejoined and has not
  // run an update finds the try the others are in.
  std::optional<uint64_t> attempt;
  const bool retry = m.outcome == LiveOutcome::kFailed;
  if (m.updated || !m.options.rejoin || retry) {
    attempt =
        retry && m.rank.generation() == generation ? m.rank.attempt() + 1 : 0;
  }
  RESHARD_RETURN_NOT_OK(
      m.rank.BeginUpdate(generation, std::string(tag), attempt));
  Status st = m.Run(bindings, &out);
  if (!st.ok()) return m.Failed(std::move(st));
  m.outcome = LiveOutcome::kOk;
  // Every rank is past this update's barrier, so nobody reads the records
  // of the updates before it any more; this one's go after the next.
  m.RemoveScopes();
  m.stale_scopes.push_back(m.rank.scope());
  m.updated = true;
  ++m.updates;
  m.last_generation = generation;
  CopyCounters(m.rank.report(), &out);
  if (m.wire->conversion != nullptr) {
    out.convert_seconds = m.wire->conversion->quantize_seconds() +
                          m.wire->conversion->apply_seconds();
  }
  RESHARD_RETURN_NOT_OK(m.Publish());
  out.update_seconds = Seconds(t0);
  return out;
}

Status LiveSession::Abort(const Status& reason) {
  Impl& m = *impl_;
  if (m.closed || m.over) return Status::OK();
  m.over = true;
  m.outcome = LiveOutcome::kFailed;
  const Status recorded = m.rank.Abort(reason, /*final=*/true);
  (void)recorded;
  return Status::OK();
}

Status LiveSession::Close() {
  Impl& m = *impl_;
  if (m.closed) return Status::OK();
  m.closed = true;
  if (m.over) return Status::OK();
  SessionRecords& s = m.rank.records();
  // With this rank's count of updates: a peer still in an update names
  // this rank as closed at once (SessionRecords::CheckClosed).
  RESHARD_RETURN_NOT_OK(
      s.Put(s.Key("closed"),
            internal::EncodeClosedRecord({m.options.rank, m.updates})));
  RESHARD_RETURN_NOT_OK(m.WaitClosed());
  // Every rank closed: nobody reads this rank's memory any more.
  m.rank.ReleaseExchange();
  return m.RemoveOwn();
}

LiveOutcome LiveSession::outcome() const { return impl_->outcome; }
bool LiveSession::usable() const { return !impl_->closed && !impl_->over; }
std::optional<LiveVersion> LiveSession::version() const {
  return impl_->version;
}
uint64_t LiveSession::connections() const { return impl_->rank.connections(); }
uint64_t LiveSession::rejoins() const { return impl_->rank.rejoins(); }
double LiveSession::plan_seconds() const {
  return impl_->rank.report().plan_seconds;
}
double LiveSession::open_seconds() const { return impl_->open_seconds; }
uint64_t LiveSession::regions() const { return impl_->rank.report().regions; }
uint64_t LiveSession::conversion_bytes() const {
  const LiveConversion* c = impl_->wire->conversion.get();
  return c == nullptr ? 0 : c->buffer_bytes();
}

uint64_t LiveSession::delta_snapshot_bytes() const {
  return impl_->rank.delta_snapshot_bytes();
}

Result<uint64_t> RemoveLiveSession(RecordStore& rendezvous,
                                   std::string_view session) {
  const std::string prefix = std::string(session) + "/";
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(prefix + "x"));
  RESHARD_ASSIGN_OR_RETURN(auto keys, rendezvous.List(prefix));
  for (const std::string& key : keys) {
    RESHARD_RETURN_NOT_OK(rendezvous.Delete(key));
  }
  return static_cast<uint64_t>(keys.size());
}

}  // namespace reshard
