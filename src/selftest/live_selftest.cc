// RunLiveSelfTest: fork one process per rank (or run one given rank; over
// the in-process exchange, one thread per rank), each with only its own
// participants' buffers, and collect their reports from the rendezvous.

#include "selftest/live_selftest.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "live/live_conversion.h"
#include "live/live_records.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "reshard/sdk/record_store.h"
#include "selftest/converted_pattern.h"
#include "selftest/host_buffers.h"
#include "selftest/live_reports.h"
#include "selftest/pattern.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

struct RankShare {
  std::vector<std::string> sources, targets;
};

std::vector<std::string> ParticipantsWithFragments(
    const WeightPlacementManifest& m) {
  std::vector<std::string> out;
  for (const auto& part : m.parts()) {
    if (!part.fragments().empty()) out.push_back(part.participant_id());
  }
  return out;
}

// Sources on ranks [0, s), targets on [s, procs); all on rank 0 if procs
// is 1.
RankShare ShareOf(const WeightPlacementManifest& source,
                  const WeightPlacementManifest& target, uint32_t procs,
                  uint32_t rank) {
  const uint32_t s = procs >= 2 ? std::max<uint32_t>(1, procs / 2) : 1;
  RankShare share;
  const auto src = ParticipantsWithFragments(source);
  const auto dst = ParticipantsWithFragments(target);
  for (size_t i = 0; i < src.size(); ++i) {
    if (i % s == rank) share.sources.push_back(src[i]);
  }
  for (size_t j = 0; j < dst.size(); ++j) {
    const uint32_t r = procs >= 2 ? s + j % (procs - s) : 0;
    if (r == rank) share.targets.push_back(dst[j]);
  }
  return share;
}

Result<WeightRuntimeBindingManifest> WithGeneration(
    const WeightRuntimeBindingManifest& b, uint64_t generation) {
  WeightRuntimeBindingManifestSpec spec{
      b.resource_id(), b.placement_id(),   b.placement_digest(),
      b.instance_id(), generation,         b.lease_id(),
      b.revision(),    b.participant_id(), b.fragments()};
  return WeightRuntimeBindingManifest::Make(std::move(spec));
}

// restart-rank: the first target rank dies after this update and a new
// process takes its place for the next; corrupt-message: the update that
// fails.
constexpr uint32_t kRestartAfterUpdate = 2;
constexpr uint64_t kCorruptedUpdate = 2;

// The first rank that hosts targets (rank 0 when everything is there).
uint32_t FirstTargetRank(uint32_t procs) {
  return procs >= 2 ? std::max<uint32_t>(1, procs / 2) : 0;
}

// One process's seat in a standing session: rank `rank` of `procs`,
// opened, or (rejoin) taken over from a process that died after update
// kRestartAfterUpdate.
struct Seat {
  uint32_t rank = 0;
  uint32_t procs = 1;
  bool rejoin = false;

  uint32_t first_update() const { return rejoin ? kRestartAfterUpdate + 1 : 1; }
  // Whether this process dies (restart-rank) before update k.
  bool DiesBefore(const SelfTestOptions& options, uint32_t k) const {
    return options.fault == SelfTestFault::kRestartRank && !rejoin &&
           rank == FirstTargetRank(procs) && k == kRestartAfterUpdate + 1;
  }
};

// Adds update `k`'s figures to the rank's per-update lists.
void AddUpdate(const LiveUpdateReport& u, uint32_t k, const Seat& seat,
               SelfTestReport* report) {
  // From the last rank's arrival on: the session's own time.
  report->update_seconds.push_back(u.update_seconds - u.arrival_seconds);
  report->bytes = u.bytes_received;
  report->wire_bytes.push_back(u.wire_bytes);
  report->delta_regions.push_back(u.delta_regions);
  report->full_regions.push_back(u.full_regions);
  report->encode_seconds.push_back(u.encode_seconds);
  report->apply_seconds.push_back(u.apply_seconds);
  report->verified_regions.push_back(u.verified_regions);
  report->verify_seconds.push_back(u.verify_seconds);
  report->operations = u.operations;
  report->messages = u.messages_sent + u.gets;
  report->packed_messages = u.packed_messages;
  report->ranks_ready = u.ready ? 1 : 0;
  // The fastest update's exchange: the session's transfer time.
  const bool first = report->seconds == 0 && k == seat.first_update();
  if (first || u.transfer_seconds < report->seconds) {
    report->seconds = u.transfer_seconds;
  }
}

// An update that failed with the session still usable: 0 in every
// per-update list, and its error.
void AddFailedUpdate(uint32_t k, const Status& error, SelfTestReport* report) {
  for (auto* list : {&report->update_seconds, &report->encode_seconds,
                     &report->apply_seconds, &report->verify_seconds}) {
    list->push_back(0);
  }
  for (auto* list : {&report->wire_bytes, &report->delta_regions,
                     &report->full_regions, &report->verified_regions}) {
    list->push_back(0);
  }
  report->failed_updates.push_back(k);
  report->failures.push_back("update " + std::to_string(k) + ": " +
                             error.ToString());
}

// What is wrong with the targets after update k ("" when nothing): the
// pattern check, or the injected corruption that did not fail the update.
std::string CheckUpdate(
    const WeightPlacementManifest& target, const SelfTestOptions& options,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& dst, const ConvertedPatternCheck* check, uint32_t k) {
  if (options.fault == SelfTestFault::kCorruptMessage &&
      k == kCorruptedUpdate) {
    return "succeeded although --inject-fault corrupt-message flipped a "
           "byte a target rank received";
  }
  return check != nullptr ? check->Verify(tensors, k)
                          : VerifyPattern(target, tensors, dst, nullptr, k,
                                          options.change_fraction);
}

// One standing session with options.updates updates: update k fills the
// sources with generation k's pattern, and every target rank checks
// generation k's bytes after the update returned (so a region skipped in
// update k, still holding k - 1's bytes, is caught). The check runs outside
// the update so that update times are the session's own. The injected
// corrupt-message update fails on every rank and the session goes on; a
// restart-rank process records what it ran before it dies.
Result<SelfTestReport> RunUpdates(
    RecordStore& store, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const SelfTestOptions& options,
    LiveSessionOptions lo, const LiveBindings& bindings,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& src, const HostBuffers& dst,
    const ConvertedPatternCheck* check, const Seat& seat) {
  lo.validate_targets = nullptr;
  lo.rejoin = seat.rejoin;
  lo.rejoin_timeout = options.rejoin_timeout;
  if (options.fault == SelfTestFault::kCorruptMessage &&
      seat.rank == FirstTargetRank(seat.procs)) {
    lo.corrupt_received_in_update = kCorruptedUpdate;
  }
  RESHARD_ASSIGN_OR_RETURN(
      auto session, LiveSession::Open(store, source, target, bindings, lo));
  SelfTestReport report;
  report.verified = true;
  report.opens = seat.rejoin ? 0 : 1;
  report.open_seconds = session->open_seconds();
  report.snapshot_bytes = session->delta_snapshot_bytes();
  report.plan_seconds = session->plan_seconds();
  const bool draws = seat.rank == 0 && options.progress != nullptr;
  if (draws) options.progress("updates", 0);
  for (uint32_t k = seat.first_update(); k <= options.updates; ++k) {
    if (options.fault == SelfTestFault::kKillBetweenUpdates && seat.rank == 0 &&
        k == 2) {
      ::raise(SIGKILL);
    }
    if (seat.DiesBefore(options, k)) {
      report.rejoins = session->rejoins();
      (void)store.Put(SelfTestPartialReportKey(lo.session, seat.rank),
                      ReportOf(seat.rank, report));
      ::raise(SIGKILL);
    }
    FillPattern(source, tensors, src, nullptr, k, options.change_fraction);
    auto u = session->Update(k);
    if (!u.ok()) {
      const bool injected = options.fault == SelfTestFault::kCorruptMessage &&
                            k == kCorruptedUpdate;
      if (!injected || !session->usable()) return u.status();
      AddFailedUpdate(k, u.status(), &report);
      continue;
    }
    const std::string mismatch =
        CheckUpdate(target, options, tensors, dst, check, k);
    if (mismatch.empty() && k == 1 &&
        options.fault == SelfTestFault::kOverwriteTargets) {
      for (const auto& [id, p] : dst.data) {
        std::memset(p, 0x5A, target.FindFragment(id)->nbytes());
      }
    }
    if (!mismatch.empty()) {
      (void)session->Abort(Status::DataLoss("target bytes differ"));
      report.verified = false;
      report.mismatch = "update " + std::to_string(k) + ": " + mismatch;
      return report;
    }
    // Rank 0 alone draws (the ranks share the terminal).
    if (draws) options.progress("updates", double(k) / options.updates);
    AddUpdate(*u, k, seat, &report);
  }
  report.rejoins = session->rejoins();
  RESHARD_RETURN_NOT_OK(session->Close());
  return report;
}

// The fault `options.fault` asks of rank `rank` (failure-path tests): a
// stage hook that kills it, or a fence that sees its generation moved on.
// `bindings` must outlive the session.
void InjectFault(const SelfTestOptions& options, uint32_t procs, uint32_t rank,
                 const LiveBindings& bindings, LiveSessionOptions& lo) {
  const uint32_t first_target_rank = FirstTargetRank(procs);
  if (options.fault == SelfTestFault::kKillSource && rank == 0) {
    // A pushing source dies after its first message; a source that is
    // read (pull) has no operations of its own and dies while its targets
    // read.
    lo.on_stage = [](std::string_view stage) {
      if (stage == "transfer" || stage == "completing") ::raise(SIGKILL);
    };
  }
  if (options.fault == SelfTestFault::kKillTarget &&
      rank == first_target_rank) {
    lo.on_stage = [](std::string_view stage) {
      if (stage == "transfer") ::raise(SIGKILL);
    };
  }
  if (options.fault == SelfTestFault::kStaleGeneration && rank == 0) {
    lo.current_bindings = [&bindings]() -> Result<LiveBindings> {
      LiveBindings now{{}, bindings.targets};
      for (const auto& b : bindings.sources) {
        RESHARD_ASSIGN_OR_RETURN(auto moved,
                                 WithGeneration(b, b.generation() + 1));
        now.sources.push_back(std::move(moved));
      }
      return now;
    };
  }
}

// The session options of rank `rank` of a self-test run.
LiveSessionOptions SessionOptionsOf(const SelfTestOptions& options,
                                    const std::string& session, uint32_t procs,
                                    uint32_t rank) {
  LiveSessionOptions lo;
  lo.session = session;
  lo.rank = rank;
  lo.ranks = procs;
  lo.timeout = options.timeout;
  lo.max_in_flight = options.max_in_flight;
  lo.protocol = options.protocol;
  lo.exchange = options.transport == "inproc" ? "inproc" : "ucx";
  lo.delta = options.delta;
  lo.delta_threads = options.delta_threads;
  lo.verify = options.verify;
  lo.exchange_options = options.exchange_options;
  lo.convert = options.convert;
  lo.fp8_block = options.fp8_block;
  return lo;
}

Result<SelfTestReport> RunRank(const WeightPlacementManifest& source,
                               const WeightPlacementManifest& target,
                               const SelfTestOptions& options,
                               RecordStore& store, const std::string& session,
                               uint32_t procs, uint32_t rank,
                               bool rejoin = false) {
  const RankShare share = ShareOf(source, target, procs, rank);
  const std::string instance = session + "-rank" + std::to_string(rank);
  HostBuffers src, dst;
  if (!share.sources.empty()) {
    RESHARD_ASSIGN_OR_RETURN(
        src, AllocateHostBuffers(source, instance, share.sources));
  }
  if (!share.targets.empty()) {
    RESHARD_ASSIGN_OR_RETURN(
        dst, AllocateHostBuffers(target, instance, share.targets));
  }
  const auto tensors = TensorIndex(source);
  // With updates, each update fills its own generation's pattern (and the
  // ranks open the session without waiting for a fill first).
  if (options.updates == 0) {
    FillPattern(source, tensors, src);
    for (const auto& [id, p] : dst.data) {
      std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
    }
  }
  // Checked when allocated; the session does not check them again.
  LiveBindings bindings{src.bindings, dst.bindings, src.checked, dst.checked};
  LiveSessionOptions lo = SessionOptionsOf(options, session, procs, rank);
  std::unique_ptr<ConvertedPatternCheck> check;
  if (options.convert && !dst.data.empty()) {
    auto made =
        ConvertedPatternCheck::Make(source, target, options.fp8_block, dst);
    if (!made.ok()) {
      // Refused before joining: the other ranks stop at once.
      (void)AbortLiveSession(store, session, rank, made.status());
      return made.status();
    }
    check = std::move(made).ValueOrDie();
  }
  std::string mismatch;
  lo.validate_targets = [&]() -> Status {
    mismatch = check != nullptr ? check->Verify(tensors, 0)
                                : VerifyPattern(target, tensors, dst);
    if (mismatch.empty()) return Status::OK();
    return Status::DataLoss("target bytes differ: " + mismatch);
  };
  InjectFault(options, procs, rank, bindings, lo);
  if (options.updates > 0) {
    return RunUpdates(store, source, target, options, std::move(lo), bindings,
                      tensors, src, dst, check.get(),
                      Seat{rank, procs, rejoin});
  }
  auto live = RunLiveReshard(store, source, target, bindings, lo);
  SelfTestReport report;
  if (!live.ok()) {
    if (mismatch.empty()) return live.status();
    report.mismatch = mismatch;  // the validator failed: not verified
    return report;
  }
  report.verified = true;
  report.bytes = live->bytes_received;
  report.wire_bytes.push_back(live->wire_bytes);
  report.verified_regions.push_back(live->verified_regions);
  report.verify_seconds.push_back(live->verify_seconds);
  report.operations = live->operations;
  report.messages = live->messages_sent + live->gets;
  report.packed_messages = live->packed_messages;
  report.ranks_ready = live->ready ? 1 : 0;
  report.seconds = live->transfer_seconds;
  report.plan_seconds = live->plan_seconds;
  return report;
}

// The ranks a self-test may run: at most kMaxSelfTestProcs, and no more
// than the participants with fragments (one rank per participant is the
// most the placements can use).
Status CheckProcs(const WeightPlacementManifest& source,
                  const WeightPlacementManifest& target, uint32_t procs) {
  if (procs == 0) return Status::InvalidArgument("--procs must be at least 1");
  if (procs > kMaxSelfTestProcs) {
    return Status::InvalidArgument(
        "--procs " + std::to_string(procs) + " is over the limit of " +
        std::to_string(kMaxSelfTestProcs) + " processes");
  }
  const size_t sources = ParticipantsWithFragments(source).size();
  const size_t targets = ParticipantsWithFragments(target).size();
  if (procs > 1 && procs > sources + targets) {
    return Status::InvalidArgument(
        "--procs " + std::to_string(procs) + " is more than the " +
        std::to_string(sources + targets) +
        " processes the placements can use (" + std::to_string(sources) +
        " source and " + std::to_string(targets) +
        " target participants with fragments)");
  }
  return Status::OK();
}

}  // namespace

std::chrono::milliseconds LaunchDeadline(const SelfTestOptions& options) {
  // About 30 years: a deadline the steady clock can still add to now.
  constexpr int64_t kLongest = int64_t{1} << 40;
  const int64_t per_step = std::max<int64_t>(options.timeout.count(), 0);
  const int64_t steps = 3 * (int64_t{1} + options.updates);
  int64_t ms = 0;
  if (__builtin_mul_overflow(per_step, steps, &ms) || ms > kLongest) {
    ms = kLongest;
  }
  return std::chrono::milliseconds(ms);
}

namespace {

// "12.5": a duration in seconds for messages.
std::string FormatSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(d.count()) / 1000);
  return buf;
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return "died of signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// The fault the run injects against the run: a rank is killed only in a
// process of its own, and the recovery faults need a session whose update
// 2 has updates after it and a target rank apart from the sources.
Status CheckFault(const SelfTestOptions& options) {
  const SelfTestFault f = options.fault;
  const bool kills = f == SelfTestFault::kKillSource ||
                     f == SelfTestFault::kKillTarget ||
                     f == SelfTestFault::kKillBetweenUpdates ||
                     f == SelfTestFault::kRestartRank;
  if (options.transport == "inproc" && (options.rank || kills)) {
    return Status::InvalidArgument(
        "the inproc transport runs every rank as a thread of one process: "
        "it cannot run a single --rank or kill a rank (use ucx)");
  }
  if (f != SelfTestFault::kCorruptMessage && f != SelfTestFault::kRestartRank) {
    return Status::OK();
  }
  const std::string name = f == SelfTestFault::kCorruptMessage
                               ? "--inject-fault corrupt-message"
                               : "--inject-fault restart-rank";
  if (options.updates < 3 || options.procs < 2) {
    return Status::InvalidArgument(name +
                                   " needs --updates 3 or more and --procs 2 "
                                   "or more");
  }
  if (f == SelfTestFault::kRestartRank && options.rank) {
    return Status::InvalidArgument(
        name +
        " needs the launcher, which starts the killed rank again "
        "(not --rank)");
  }
  return Status::OK();
}

// The process count and, for a single-rank run, the rank and a shared
// rendezvous.
Status CheckLaunch(const WeightPlacementManifest& source,
                   const WeightPlacementManifest& target,
                   const SelfTestOptions& options) {
  const uint32_t procs = options.procs;
  RESHARD_RETURN_NOT_OK(CheckProcs(source, target, procs));
  if (options.rank && *options.rank >= procs) {
    return Status::InvalidArgument("--rank " + std::to_string(*options.rank) +
                                   " is not below --procs " +
                                   std::to_string(procs));
  }
  RESHARD_RETURN_NOT_OK(CheckFault(options));
  if (!(options.change_fraction >= 0 && options.change_fraction <= 1)) {
    return Status::InvalidArgument("--change-fraction must be in [0, 1]");
  }
  if ((options.delta || options.change_fraction < 1) && options.updates == 0) {
    return Status::InvalidArgument(
        "--delta and --change-fraction need --updates K (a standing "
        "session)");
  }
  if (options.change_fraction < 1 && options.convert) {
    return Status::InvalidArgument(
        "--change-fraction does not combine with --convert");
  }
  if (options.rank && options.rendezvous.empty()) {
    return Status::InvalidArgument(
        "--rank needs --rendezvous DIR shared by every rank");
  }
  return Status::OK();
}

// The rendezvous directory of a run: the caller's, or a fresh temporary
// directory removed when the run ends.
class RendezvousDir {
 public:
  static Result<std::unique_ptr<RendezvousDir>> Make(
      const std::string& requested) {
    namespace fs = std::filesystem;
    if (!requested.empty()) {
      return std::unique_ptr<RendezvousDir>(
          new RendezvousDir(requested, false));
    }
    std::string tmpl = (fs::temp_directory_path() / "reshard-live-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return Status::IOError("cannot create a rendezvous directory in " +
                             fs::temp_directory_path().string());
    }
    return std::unique_ptr<RendezvousDir>(new RendezvousDir(tmpl, true));
  }
  ~RendezvousDir() {
    std::error_code ec;
    if (remove_) std::filesystem::remove_all(path_, ec);
  }
  RendezvousDir(const RendezvousDir&) = delete;
  RendezvousDir& operator=(const RendezvousDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  RendezvousDir(std::string path, bool remove)
      : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_;
};

// The caller's session key, or one unique to this run.
std::string SessionKey(const SelfTestOptions& options) {
  if (!options.session.empty()) return options.session;
  return "selftest-" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

// The launcher's result is its own ranks' exit statuses and records:
// records of an earlier run under this session would be read as this
// run's (and make every rank fail to publish).
Status RefuseUsedSession(RecordStore& store, const std::string& session,
                         const std::string& dir) {
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(session));
  RESHARD_ASSIGN_OR_RETURN(auto earlier, store.List(session + "/"));
  if (!earlier.empty()) {
    return Status::AlreadyExists(
        "live session " + session + " already has " +
        std::to_string(earlier.size()) + " record(s) in rendezvous " + dir +
        " (" + earlier[0] + (earlier.size() > 1 ? ", ..." : "") +
        "); use a new --session or remove them");
  }
  return Status::OK();
}

// Forks the process of rank `r` (a new one in the place of a dead one
// when `rejoin`): it runs its rank, writes its report record and exits.
// Returns its process id, or -1 when fork failed.
pid_t ForkRank(const WeightPlacementManifest& source,
               const WeightPlacementManifest& target,
               const SelfTestOptions& options, RecordStore& store,
               const std::string& session, uint32_t r, bool rejoin) {
  // Nothing buffered may be inherited (and written again) by the ranks.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The launcher owns stdout (a --json report); UCX logs to stdout by
  // default, so a rank's stdout goes to stderr.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  auto report = RunRank(source, target, options, store, session, options.procs,
                        r, rejoin);
  const Status put =
      store.Put(SelfTestReportKey(session, r), ReportOf(r, report));
  std::fflush(stdout);
  std::_Exit(report.ok() && put.ok() ? 0 : 1);
}

// Forks one process per rank. Returns the ranks' process ids.
Result<std::vector<pid_t>> LaunchRanks(const WeightPlacementManifest& source,
                                       const WeightPlacementManifest& target,
                                       const SelfTestOptions& options,
                                       RecordStore& store,
                                       const std::string& session) {
  std::vector<pid_t> pids(options.procs, -1);
  for (uint32_t r = 0; r < options.procs; ++r) {
    pids[r] = ForkRank(source, target, options, store, session, r, false);
    if (pids[r] < 0) {
      const int error = errno;
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
      return Status::IOError(std::string("fork failed: ") +
                             std::strerror(error));
    }
  }
  return pids;
}

// Runs every rank as a thread of this process (the in-process exchange);
// each writes its report record. Returns, per rank, "" or how it failed.
std::vector<std::string> RunRankThreads(const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const SelfTestOptions& options,
                                        RecordStore& store,
                                        const std::string& session) {
  const uint32_t procs = options.procs;
  std::vector<std::string> exits(procs);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < procs; ++r) {
    threads.emplace_back([&, r] {
      auto report = RunRank(source, target, options, store, session, procs, r);
      const Status put =
          store.Put(SelfTestReportKey(session, r), ReportOf(r, report));
      if (!report.ok() || !put.ok()) exits[r] = "failed";
    });
  }
  for (std::thread& t : threads) t.join();
  return exits;
}

// Which dead ranks get a new process in their place (restart-rank), and
// starting one: its process id, or -1 when fork failed.
struct RestartRank {
  std::function<bool(uint32_t r)> wanted;
  std::function<pid_t(uint32_t r)> start;
};

// Waits for every rank; a rank that dies without a report gets an abort
// record so that the others stop at once instead of at their timeout:
// final, unless `restart` wants a new process in its place (the others of
// a standing session then wait for it to rejoin), which is started once
// the abort is recorded and waited for in turn. Ranks still running after
// `limit` are killed, and said to have been ended at the deadline.
// Returns, per rank, how it ended when that was not a clean exit ("" when
// it was).
std::vector<std::string> ReapRanks(std::vector<pid_t> pids, RecordStore& store,
                                   const std::string& session,
                                   std::chrono::milliseconds limit,
                                   const RestartRank& restart) {
  const auto deadline = Clock::now() + limit;
  bool killed = false;
  const uint32_t procs = static_cast<uint32_t>(pids.size());
  uint32_t running = procs;
  std::vector<std::string> exits(procs);
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (uint32_t r = 0; r < procs; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --running;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        exits[r] = killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                       ? "was still running at the launcher's deadline (" +
                             FormatSeconds(limit) +
                             " s: 3 x --timeout x (1 + updates)) and was "
                             "ended"
                       : DescribeExit(status);
        if (store.Get(SelfTestReportKey(session, r)).ok()) continue;
        const bool rejoins = !killed && restart.wanted(r);
        (void)store.Put(session + "/abort/" + std::to_string(r),
                        internal::EncodeAbortRecord(
                            r, "rank " + std::to_string(r) + " " + exits[r], 0,
                            /*final=*/!rejoins));
        const pid_t again = rejoins ? restart.start(r) : -1;
        if (again > 0) {
          pids[r] = again;
          ++running;
          exits[r].clear();
        }
      }
      continue;
    }
    if (!killed && Clock::now() > deadline) {
      killed = true;
      for (uint32_t r = 0; r < procs; ++r) {
        if (pids[r] > 0) ::kill(pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return exits;
}

// The plan of what the ranks move: with convert, between the session's
// wire placements (FP8 quantized at the source travels as FP8).
Result<LogicalTransferPlan> WirePlan(const WeightPlacementManifest& source,
                                     const WeightPlacementManifest& target,
                                     const SelfTestOptions& options) {
  if (!options.convert) return LogicalTransferPlan::Make(source, target);
  ConversionOptions c;
  c.block = options.fp8_block;
  RESHARD_ASSIGN_OR_RETURN(
      auto wire, live_internal::LiveConversion::Make(source, target, {}, c));
  return LogicalTransferPlan::Make(wire->wire_source(), wire->wire_target());
}

// The ranks' total against the plan, and the memcpy baseline.
void CompleteReport(const LogicalTransferPlan& plan, double plan_seconds,
                    const SelfTestOptions& options, SelfTestReport* total) {
  total->plan_seconds = plan_seconds;
  total->segments = plan.summary().segments;
  if (total->verified && total->bytes != plan.summary().bytes) {
    total->verified = false;
    total->mismatch = "targets received " + std::to_string(total->bytes) +
                      " bytes, the plan moves " +
                      std::to_string(plan.summary().bytes);
  }
  if (options.measure_memcpy) {
    total->memcpy_gbps = MeasureMemcpyGbps(
        std::min<uint64_t>(total->bytes, uint64_t{256} << 20), 1);
  }
}

}  // namespace

Result<SelfTestReport> RunLiveSelfTest(const WeightPlacementManifest& source,
                                       const WeightPlacementManifest& target,
                                       const SelfTestOptions& options) {
  RESHARD_RETURN_NOT_OK(CheckLaunch(source, target, options));
  // Plan once here: invalid inputs fail before any process starts.
  const auto t0 = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(auto plan, WirePlan(source, target, options));
  const double plan_seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  RESHARD_ASSIGN_OR_RETURN(auto dir, RendezvousDir::Make(options.rendezvous));
  RESHARD_ASSIGN_OR_RETURN(auto store, OpenRendezvous(dir->path()));
  const std::string session = SessionKey(options);
  if (options.rank) {
    auto report = RunRank(source, target, options, *store, session,
                          options.procs, *options.rank);
    if (report.ok()) report->segments = plan.summary().segments;
    return report;
  }
  RESHARD_RETURN_NOT_OK(RefuseUsedSession(*store, session, dir->path()));
  std::vector<std::string> exits;
  std::map<uint32_t, std::string> partials;  // restart-rank
  if (options.transport == "inproc") {
    exits = RunRankThreads(source, target, options, *store, session);
  } else {
    RESHARD_ASSIGN_OR_RETURN(
        std::vector<pid_t> pids,
        LaunchRanks(source, target, options, *store, session));
    // restart-rank: the rank that died after writing its partial report
    // is started again, once; the new process removes the records of the
    // one it replaces, so the launcher takes the report first.
    RestartRank restart;
    restart.wanted = [&](uint32_t r) {
      if (options.fault != SelfTestFault::kRestartRank || !partials.empty()) {
        return false;
      }
      auto partial = store->Get(SelfTestPartialReportKey(session, r));
      if (partial.ok()) partials[r] = *std::move(partial);
      return partial.ok();
    };
    restart.start = [&](uint32_t r) {
      return ForkRank(source, target, options, *store, session, r, true);
    };
    exits = ReapRanks(std::move(pids), *store, session, LaunchDeadline(options),
                      restart);
  }
  RESHARD_ASSIGN_OR_RETURN(SelfTestReport total,
                           CollectReports(*store, session, exits, partials));
  CompleteReport(plan, plan_seconds, options, &total);
  return total;
}

}  // namespace reshard::internal
