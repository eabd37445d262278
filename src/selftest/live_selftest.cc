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
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "live/live_conversion.h"
#include "live/live_records.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "reshard/sdk/record_store.h"
#include "selftest/converted_pattern.h"
#include "selftest/host_buffers.h"
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

// One standing session with options.updates updates: update k fills the
// sources with generation k's pattern, and every target rank checks
// generation k's bytes after the update returned (so a region skipped in
// update k, still holding k - 1's bytes, is caught). The check runs outside
// the update so that update times are the session's own.
Result<SelfTestReport> RunUpdates(
    RecordStore& store, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const SelfTestOptions& options,
    LiveSessionOptions lo, const LiveBindings& bindings,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& src, const HostBuffers& dst,
    const ConvertedPatternCheck* check, uint32_t rank) {
  lo.validate_targets = nullptr;
  RESHARD_ASSIGN_OR_RETURN(
      auto session, LiveSession::Open(store, source, target, bindings, lo));
  SelfTestReport report;
  report.verified = true;
  report.open_seconds = session->open_seconds();
  report.snapshot_bytes = session->delta_snapshot_bytes();
  report.plan_seconds = session->plan_seconds();
  if (rank == 0 && options.progress) options.progress("updates", 0);
  for (uint32_t k = 1; k <= options.updates; ++k) {
    if (options.fault == SelfTestFault::kKillBetweenUpdates && rank == 0 &&
        k == 2) {
      ::raise(SIGKILL);
    }
    FillPattern(source, tensors, src, nullptr, k, options.change_fraction);
    RESHARD_ASSIGN_OR_RETURN(auto u, session->Update(k));
    const std::string mismatch =
        check != nullptr ? check->Verify(tensors, k)
                         : VerifyPattern(target, tensors, dst, nullptr, k,
                                         options.change_fraction);
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
    if (rank == 0 && options.progress) {
      options.progress("updates", double(k) / options.updates);
    }
    // From the last rank's arrival on: the session's own time.
    report.update_seconds.push_back(u.update_seconds - u.arrival_seconds);
    report.bytes = u.bytes_received;
    report.wire_bytes.push_back(u.wire_bytes);
    report.delta_regions.push_back(u.delta_regions);
    report.full_regions.push_back(u.full_regions);
    report.encode_seconds.push_back(u.encode_seconds);
    report.apply_seconds.push_back(u.apply_seconds);
    report.operations = u.operations;
    report.messages = u.messages_sent + u.gets;
    report.packed_messages = u.packed_messages;
    report.ranks_ready = u.ready ? 1 : 0;
    // The fastest update's exchange: the session's transfer time.
    if (k == 1 || u.transfer_seconds < report.seconds) {
      report.seconds = u.transfer_seconds;
    }
  }
  RESHARD_RETURN_NOT_OK(session->Close());
  return report;
}

// The fault `options.fault` asks of rank `rank` (failure-path tests): a
// stage hook that kills it, or a fence that sees its generation moved on.
// `bindings` must outlive the session.
void InjectFault(const SelfTestOptions& options, uint32_t procs, uint32_t rank,
                 const LiveBindings& bindings, LiveSessionOptions& lo) {
  const uint32_t first_target_rank =
      procs >= 2 ? std::max<uint32_t>(1, procs / 2) : 0;
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

Result<SelfTestReport> RunRank(const WeightPlacementManifest& source,
                               const WeightPlacementManifest& target,
                               const SelfTestOptions& options,
                               RecordStore& store, const std::string& session,
                               uint32_t procs, uint32_t rank) {
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
  lo.exchange_options = options.exchange_options;
  lo.convert = options.convert;
  lo.fp8_block = options.fp8_block;
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
                      tensors, src, dst, check.get(), rank);
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
  report.operations = live->operations;
  report.messages = live->messages_sent + live->gets;
  report.packed_messages = live->packed_messages;
  report.ranks_ready = live->ready ? 1 : 0;
  report.seconds = live->transfer_seconds;
  report.plan_seconds = live->plan_seconds;
  return report;
}

// Rank `r`'s report record: its outcome, or `error`.
std::string ReportOf(uint32_t r, const Result<SelfTestReport>& report) {
  internal::ReportRecord rec;
  rec.rank = r;
  if (!report.ok()) {
    rec.error = report.status().ToString();
    return EncodeReportRecord(rec);
  }
  rec.verified = report->verified;
  rec.ready = report->ranks_ready > 0;
  rec.bytes = report->bytes;
  rec.operations = report->operations;
  rec.messages = report->messages;
  rec.packed_messages = report->packed_messages;
  rec.plan_ns = static_cast<uint64_t>(report->plan_seconds * 1e9);
  rec.transfer_ns = static_cast<uint64_t>(report->seconds * 1e9);
  rec.open_ns = static_cast<uint64_t>(report->open_seconds * 1e9);
  auto nanos = [](const std::vector<double>& seconds) {
    std::vector<int64_t> out;
    for (double s : seconds) out.push_back(static_cast<int64_t>(s * 1e9));
    return out;
  };
  rec.update_ns = nanos(report->update_seconds);
  rec.encode_ns = nanos(report->encode_seconds);
  rec.apply_ns = nanos(report->apply_seconds);
  for (uint64_t w : report->wire_bytes) {
    rec.wire_bytes.push_back(static_cast<int64_t>(w));
  }
  for (uint64_t d : report->delta_regions) {
    rec.delta_regions.push_back(static_cast<int64_t>(d));
  }
  for (uint64_t f : report->full_regions) {
    rec.full_regions.push_back(static_cast<int64_t>(f));
  }
  rec.snapshot_bytes = report->snapshot_bytes;
  rec.mismatch = report->mismatch;
  return EncodeReportRecord(rec);
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
  if (options.transport == "inproc" &&
      (options.rank || options.fault == SelfTestFault::kKillSource ||
       options.fault == SelfTestFault::kKillTarget ||
       options.fault == SelfTestFault::kKillBetweenUpdates)) {
    return Status::InvalidArgument(
        "the inproc transport runs every rank as a thread of one process: "
        "it cannot run a single --rank or kill a rank (use ucx)");
  }
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

std::string ReportKey(const std::string& session, uint32_t rank) {
  return session + "/report/" + std::to_string(rank);
}

// Forks one process per rank; each runs its rank, writes its report record
// and exits. Returns the ranks' process ids.
Result<std::vector<pid_t>> LaunchRanks(const WeightPlacementManifest& source,
                                       const WeightPlacementManifest& target,
                                       const SelfTestOptions& options,
                                       RecordStore& store,
                                       const std::string& session) {
  const uint32_t procs = options.procs;
  // Nothing buffered may be inherited (and written again) by the ranks.
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(procs, -1);
  for (uint32_t r = 0; r < procs; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
      return Status::IOError(std::string("fork failed: ") +
                             std::strerror(errno));
    }
    if (pid == 0) {
      // The launcher owns stdout (a --json report); UCX logs to stdout by
      // default, so a rank's stdout goes to stderr.
      std::fflush(stdout);
      ::dup2(STDERR_FILENO, STDOUT_FILENO);
      auto report = RunRank(source, target, options, store, session, procs, r);
      const Status put = store.Put(ReportKey(session, r), ReportOf(r, report));
      std::fflush(stdout);
      std::_Exit(report.ok() && put.ok() ? 0 : 1);
    }
    pids[r] = pid;
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
      const Status put = store.Put(ReportKey(session, r), ReportOf(r, report));
      if (!report.ok() || !put.ok()) exits[r] = "failed";
    });
  }
  for (std::thread& t : threads) t.join();
  return exits;
}

// Waits for every rank; a rank that dies without a report gets an abort
// record so that the others stop at once instead of at their timeout.
// Ranks still running after `limit` are killed, and said to have been
// ended at the deadline. Returns, per rank, how it ended when that was not
// a clean exit ("" otherwise).
std::vector<std::string> ReapRanks(std::vector<pid_t> pids, RecordStore& store,
                                   const std::string& session,
                                   std::chrono::milliseconds limit) {
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
        if (!store.Get(ReportKey(session, r)).ok()) {
          (void)store.Put(session + "/abort/" + std::to_string(r),
                          internal::EncodeAbortRecord(
                              r, "rank " + std::to_string(r) + " " + exits[r]));
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

// Adds a rank's per-update counts into the ranks' totals.
void AddPerUpdate(const std::vector<int64_t>& rank,
                  std::vector<uint64_t>* total) {
  if (total->size() < rank.size()) total->resize(rank.size(), 0);
  for (size_t k = 0; k < rank.size(); ++k) {
    (*total)[k] += static_cast<uint64_t>(rank[k]);
  }
}

// Per update, the slowest rank's nanoseconds as seconds.
void MaxPerUpdate(const std::vector<int64_t>& rank,
                  std::vector<double>* slowest) {
  if (slowest->size() < rank.size()) slowest->resize(rank.size(), 0.0);
  for (size_t k = 0; k < rank.size(); ++k) {
    (*slowest)[k] = std::max((*slowest)[k], rank[k] / 1e9);
  }
}

// The ranks' reports summed, and why the run failed if it did: a rank that
// died or failed without a report, else a rank's own error (a malformed
// report is one), else an echo of another rank's abort.
class ReportCollector {
 public:
  ReportCollector() { total_.verified = true; }

  // Adds rank `r`'s report record (or its absence) and exit description.
  void Add(uint32_t r, const std::string& key, const Result<std::string>& text,
           const std::string& exit) {
    const bool exited_ok = exit.empty();
    if (!text.ok()) {
      if (died_.empty()) {
        died_ = "rank " + std::to_string(r) + " " +
                (exited_ok ? "exited with status 0 but left no report" : exit);
      }
      return;
    }
    auto rec = internal::DecodeReportRecord(*text, key, r);
    std::string error;
    if (!rec.ok()) {
      error = rec.status().ToString();
    } else if (!rec->error.empty()) {
      error = rec->error;
    } else if (!exited_ok) {
      // A rank that did not exit with status 0 fails the run whatever its
      // report says.
      error = exit + " (its report record holds no error)";
    }
    if (!error.empty()) {
      const bool echo = rec.ok() && !rec->error.empty() &&
                        error.find("aborted by rank") != std::string::npos;
      std::string& slot = echo ? other_ : root_cause_;
      if (slot.empty()) slot = "rank " + std::to_string(r) + ": " + error;
      return;
    }
    total_.verified = total_.verified && rec->verified;
    if (total_.mismatch.empty()) total_.mismatch = rec->mismatch;
    total_.bytes += rec->bytes;
    total_.operations += rec->operations;
    total_.messages += rec->messages;
    total_.packed_messages += rec->packed_messages;
    total_.ranks_ready += rec->ready ? 1 : 0;
    total_.seconds = std::max(total_.seconds, rec->transfer_ns / 1e9);
    total_.open_seconds = std::max(total_.open_seconds, rec->open_ns / 1e9);
    MaxPerUpdate(rec->update_ns, &total_.update_seconds);
    MaxPerUpdate(rec->encode_ns, &total_.encode_seconds);
    MaxPerUpdate(rec->apply_ns, &total_.apply_seconds);
    AddPerUpdate(rec->wire_bytes, &total_.wire_bytes);
    AddPerUpdate(rec->delta_regions, &total_.delta_regions);
    AddPerUpdate(rec->full_regions, &total_.full_regions);
    total_.snapshot_bytes += rec->snapshot_bytes;
  }

  // The summed report, or Aborted naming the root cause. A rank whose
  // targets differ aborts the others: that is reported as the mismatch.
  Result<SelfTestReport> Finish() && {
    if (!died_.empty() || !root_cause_.empty() ||
        (!other_.empty() && total_.mismatch.empty())) {
      return Status::Aborted("live self-test failed: " + (!died_.empty() ? died_
                                                          : !root_cause_.empty()
                                                              ? root_cause_
                                                              : other_));
    }
    if (!total_.mismatch.empty()) total_.verified = false;
    return std::move(total_);
  }

 private:
  SelfTestReport total_;
  std::string died_, root_cause_, other_;
};

// Reads every rank's report record after the ranks have ended.
Result<SelfTestReport> CollectReports(RecordStore& store,
                                      const std::string& session,
                                      const std::vector<std::string>& exits) {
  ReportCollector collector;
  for (uint32_t r = 0; r < exits.size(); ++r) {
    const std::string key = ReportKey(session, r);
    collector.Add(r, key, store.Get(key), exits[r]);
  }
  return std::move(collector).Finish();
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
  if (options.transport == "inproc") {
    exits = RunRankThreads(source, target, options, *store, session);
  } else {
    RESHARD_ASSIGN_OR_RETURN(
        std::vector<pid_t> pids,
        LaunchRanks(source, target, options, *store, session));
    exits =
        ReapRanks(std::move(pids), *store, session, LaunchDeadline(options));
  }
  RESHARD_ASSIGN_OR_RETURN(SelfTestReport total,
                           CollectReports(*store, session, exits));
  CompleteReport(plan, plan_seconds, options, &total);
  return total;
}

}  // namespace reshard::internal
