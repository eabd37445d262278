#include "tools/engine_reshard.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "reshard/live.h"
#include "reshard/reshard.h"
#include "reshard/weight_store.h"
#include "tools/cli_common.h"
#include "util/printable.h"

namespace reshard::cli {
namespace {

using Clock = std::chrono::steady_clock;
using internal::Printable;

// Every participant's parameters in host memory, bound: each binding
// checked once, for consumers that take them so (set once bound).
struct Side {
  std::vector<ParameterMemory> memory;
  std::optional<CheckedBindings> checked;
};

// Every participant's parameters in host memory from `make`, bound.
Result<Side> BindSide(
    const EngineLayout& layout, const std::string& instance,
    const std::function<Result<ParameterMemory>(const EngineParticipant&)>&
        make) {
  Side side;
  BufferBindingOptions bo;
  bo.instance_id = instance;
  std::vector<CheckedBindings> parts;
  for (const EngineParticipant& p : layout.participants()) {
    RESHARD_ASSIGN_OR_RETURN(auto m, make(p));
    bo.worker_id = p.participant_id;
    RESHARD_ASSIGN_OR_RETURN(
        CheckedBindings b,
        BindCheckedParameters(layout, p.participant_id, m.buffers(), bo));
    side.memory.push_back(std::move(m));
    parts.push_back(std::move(b));
  }
  RESHARD_ASSIGN_OR_RETURN(side.checked,
                           CheckedBindings::Merge(layout.placement(), parts,
                                                  BindingCoverage::kSubset));
  return side;
}

Result<Side> AllocateSide(const EngineLayout& layout,
                          const std::string& instance) {
  return BindSide(layout, instance, ParameterMemory::Allocate);
}

// The source participants' parameter files under `dir`, mapped rather
// than read (ParameterMemory::MapFile): the move reads them straight from
// the page cache, and no fresh memory is filled with a copy of them.
// Each file must carry its participant's identity in `layout`, or none
// with `trust_file_names`.
Result<Side> MapSources(const EngineLayout& layout, const std::string& instance,
                        const std::string& dir, bool trust_file_names) {
  // One expectation whose placement ids per revision all files share.
  ParameterFileExpectation expect =
      ExpectParameterFile(layout, "", EngineParameterMapId(layout));
  expect.trust_file_names = trust_file_names;
  return BindSide(layout, instance, [&](const EngineParticipant& p) {
    expect.identity.participant_id = p.participant_id;
    auto m = ParameterMemory::MapFile(ParameterFilePath(dir, p.participant_id),
                                      p, expect);
    if (m.status().IsFailedPrecondition()) {
      return Result<ParameterMemory>(Status::FailedPrecondition(
          m.status().message() + " (--trust-file-names takes it by its name)"));
    }
    return m;
  });
}

uint64_t SideBytes(const Side& side) {
  uint64_t bytes = 0;
  for (const ParameterMemory& m : side.memory) bytes += m.bytes();
  return bytes;
}

Status WriteTargets(const EngineLayout& layout, const Side& side,
                    const std::string& dir, EngineReshardReport* report) {
  RESHARD_RETURN_NOT_OK(CreateOutputDir(dir));
  const std::string map_id = EngineParameterMapId(layout);
  for (size_t i = 0; i < layout.participants().size(); ++i) {
    const EngineParticipant& p = layout.participants()[i];
    CountPieceBytes(p, &report->bytes, &report->padding_bytes);
    RESHARD_RETURN_NOT_OK(ZeroParameterPadding(layout, p.participant_id,
                                               side.memory[i].buffers()));
    RESHARD_RETURN_NOT_OK(WriteParameterFile(
        ParameterFilePath(dir, p.participant_id), p, side.memory[i].buffers(),
        ParameterFileIdentityOf(layout, p.participant_id, map_id)));
    ++report->files;
  }
  return Status::OK();
}

Status MoveLocal(const EngineLayout& source, const Side& src,
                 const EngineLayout& target, const Side& dst,
                 const EngineReshardArgs& args) {
  ReshardOptions ro;
  ro.threads = args.threads;
  ro.plan.convert = args.convert;
  ro.plan.fp8_block = args.block;
  return Reshard(source.placement(), *src.checked, target.placement(),
                 *dst.checked, ro)
      .status();
}

Status MoveThroughStore(const EngineLayout& source, const Side& src,
                        const EngineLayout& target, const Side& dst,
                        const EngineReshardArgs& args,
                        EngineReshardReport* report) {
  WeightStoreOptions options;
  options.convert = args.convert;
  options.fp8_block = args.block;
  RESHARD_ASSIGN_OR_RETURN(auto store, WeightStore::Open(args.via, options));
  // Converting: FP8 targets quantize before the upload where the source
  // holds whole blocks (the revision holds FP8); the load converts the rest.
  ConversionOptions quantize;
  quantize.block = args.block;
  RESHARD_ASSIGN_OR_RETURN(
      auto q, SourceQuantization::Make(
                  source.placement(),
                  args.convert ? target.placement() : source.placement(),
                  src.checked->bindings(), quantize));
  RESHARD_RETURN_NOT_OK(q.Quantize(args.threads));
  // Checked once, for the upload's prepare and writes alike: bindings the
  // quantization left as they were (the same placement) keep their proof.
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings bindings,
      src.checked->RequireFor(q.placement()).ok()
          ? src.checked->Replace(q.placement(), q.bindings())
          : CheckedBindings::Make(q.placement(), q.bindings(),
                                  BindingCoverage::kSubset));
  RESHARD_ASSIGN_OR_RETURN(auto upload,
                           store.PrepareUpload(q.placement(), bindings));
  RESHARD_ASSIGN_OR_RETURN(auto receipts,
                           store.Upload(upload, q.placement(), bindings));
  RESHARD_RETURN_NOT_OK(store.Commit(upload, receipts));
  report->manifest_key = upload.manifest().manifest_key();
  RESHARD_ASSIGN_OR_RETURN(auto manifest,
                           store.ReadManifest(report->manifest_key));
  return store.Load(manifest, target.placement(), *dst.checked).status();
}

// One of the two live processes: rank 0 holds every source participant,
// rank 1 every target participant and writes their files into `out_dir`.
// `tell` hears this rank's failure before the other rank can learn of it
// (before the abort record), so that the parent hears the cause first.
Status LiveRank(const EngineLayout& source, const EngineLayout& target,
                const EngineReshardArgs& args, const std::string& rendezvous,
                const std::string& out_dir, uint32_t rank,
                const std::function<void(const Status&)>& tell,
                EngineReshardReport* report) {
  RESHARD_ASSIGN_OR_RETURN(auto store, OpenRendezvous(rendezvous));
  const std::string session = "engine-reshard";
  // Whatever fails, the other rank learns it at once (not at its timeout).
  auto abort = [&](Status s) {
    tell(s);
    (void)AbortLiveSession(*store, session, rank, s);
    return s;
  };
  const std::string instance = "engine-reshard-rank" + std::to_string(rank);
  Side src, dst;
  LiveBindings bindings;
  if (rank == 0) {
    auto side =
        MapSources(source, instance, args.source_dir, args.trust_file_names);
    if (!side.ok()) return abort(side.status());
    src = std::move(*side);
    bindings.sources = src.checked->bindings();
    bindings.checked_sources = src.checked;
  } else {
    auto side = AllocateSide(target, instance);
    if (!side.ok()) return abort(side.status());
    dst = std::move(*side);
    bindings.targets = dst.checked->bindings();
    bindings.checked_targets = dst.checked;
  }
  LiveSessionOptions lo;
  lo.session = session;
  lo.rank = rank;
  lo.ranks = 2;
  lo.timeout = args.timeout;
  lo.convert = args.convert;
  lo.fp8_block = args.block;
  auto live = RunLiveReshard(*store, source.placement(), target.placement(),
                             bindings, lo);
  if (!live.ok()) return abort(live.status());
  if (rank == 1) return WriteTargets(target, dst, out_dir, report);
  return Status::OK();
}

// "rank 0 (sources)" / "rank 1 (targets)": a live rank in messages.
std::string RankName(uint32_t rank) {
  return "rank " + std::to_string(rank) +
         (rank == 0 ? " (sources)" : " (targets)");
}

// Writes rank `rank`'s failure to the parent's report pipe as one line,
// "<rank digit><message>\n", in one write() of at most PIPE_BUF bytes:
// the two ranks' lines never interleave, and the first failure told is the
// first the parent reads.
void TellParent(int fd, uint32_t rank, const Status& s) {
  const std::string_view m = s.message();
  size_t n = std::min<size_t>(m.size(), PIPE_BUF - 16);
  while (n > 0 && n < m.size() &&
         (static_cast<unsigned char>(m[n]) & 0xC0) == 0x80) {
    --n;  // not inside a UTF-8 character
  }
  std::string line(1, static_cast<char>('0' + rank));
  line.append(m.substr(0, n));
  if (n < m.size()) line += "...";
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += '\n';
  while (::write(fd, line.data(), line.size()) < 0 && errno == EINTR) {
  }
}

// Signals that end a live run early (SIGINT, SIGTERM, SIGHUP): while a
// StopSignals lives the parent only notes them, ends both ranks, removes
// what the run created and then dies of the signal as it would have.
// SIGCHLD is at its default meanwhile: ignored, the ranks' exit statuses
// would be lost.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
volatile sig_atomic_t g_stop_signal = 0;

void NoteStopSignal(int signal) { g_stop_signal = signal; }

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction note {};
    note.sa_handler = NoteStopSignal;
    sigemptyset(&note.sa_mask);
    for (size_t i = 0; i < std::size(kStopSignals); ++i) {
      ::sigaction(kStopSignals[i], nullptr, &earlier_[i]);
      // A signal this process was started ignoring (nohup, SIGINT of a
      // background job) stays ignored.
      caught_[i] = (earlier_[i].sa_flags & SA_SIGINFO) != 0 ||
                   earlier_[i].sa_handler != SIG_IGN;
      if (caught_[i]) ::sigaction(kStopSignals[i], &note, nullptr);
    }
    struct sigaction plain {};
    plain.sa_handler = SIG_DFL;
    sigemptyset(&plain.sa_mask);
    ::sigaction(SIGCHLD, &plain, &earlier_child_);
    child_set_ = true;
  }
  ~StopSignals() { Restore(); }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The dispositions from before construction (also what a forked rank
  // runs with).
  void Restore() {
    for (size_t i = 0; i < std::size(kStopSignals); ++i) {
      if (caught_[i]) ::sigaction(kStopSignals[i], &earlier_[i], nullptr);
      caught_[i] = false;
    }
    if (child_set_) ::sigaction(SIGCHLD, &earlier_child_, nullptr);
    child_set_ = false;
  }

  // Blocks them (around fork, so that a rank never runs the parent's
  // handler) and returns the mask to restore.
  static sigset_t Block() {
    sigset_t stop, before;
    sigemptyset(&stop);
    for (int s : kStopSignals) sigaddset(&stop, s);
    ::sigprocmask(SIG_BLOCK, &stop, &before);
    return before;
  }

 private:
  struct sigaction earlier_[std::size(kStopSignals)];
  bool caught_[std::size(kStopSignals)] = {};
  struct sigaction earlier_child_;
  bool child_set_ = false;
};

// What a live run creates besides the target files: the rendezvous
// directory, the staging directory inside the output directory that rank
// 1 writes into, and the output directory itself when it was missing.
// Removed on destruction unless Keep() was called for the output.
class LiveFiles {
 public:
  LiveFiles() = default;
  LiveFiles(const LiveFiles&) = delete;
  LiveFiles& operator=(const LiveFiles&) = delete;
  ~LiveFiles() { Remove(); }

  // Removes them now (idempotent).
  void Remove() {
    std::error_code ec;
    if (!rendezvous.empty()) std::filesystem::remove_all(rendezvous, ec);
    if (!staging.empty()) std::filesystem::remove_all(staging, ec);
    if (created_output) ::rmdir(output.c_str());  // only while empty
    rendezvous.clear();
    staging.clear();
    created_output = false;
  }
  // The files are in place: the output directory stays.
  void Keep() { created_output = false; }

  std::string rendezvous, staging, output;
  bool created_output = false;
};

// Creates `files`' directories: a fresh rendezvous directory under the
// temporary directory ($TMPDIR, else /tmp) and a fresh staging directory
// in `output` (created when missing).
Status MakeLiveFiles(const std::string& output, LiveFiles* files) {
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) {
    return Status::IOError("no temporary directory for the rendezvous: " +
                           ec.message());
  }
  std::string dir = (tmp / "reshard-engine-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    return Status::IOError("cannot create a rendezvous directory in " +
                           Printable(tmp.string()) + ": " +
                           std::strerror(errno));
  }
  files->rendezvous = dir;
  files->output = output;
  RESHARD_RETURN_NOT_OK(CreateOutputDir(output, &files->created_output));
  std::string staging = output + "/.reshard-staging-XXXXXX";
  if (::mkdtemp(staging.data()) == nullptr) {
    return Status::IOError("cannot create a staging directory in " +
                           Printable(output) + ": " + std::strerror(errno));
  }
  files->staging = staging;
  return Status::OK();
}

// Links every target file rank 1 wrote into `staging` into `dir`, all or
// none: a file that exists at its place (link() never replaces) undoes the
// links made before it.
Status PlaceTargets(const EngineLayout& target, const std::string& staging,
                    const std::string& dir) {
  std::vector<std::string> placed;
  for (const EngineParticipant& p : target.participants()) {
    const std::string from = ParameterFilePath(staging, p.participant_id);
    const std::string to = ParameterFilePath(dir, p.participant_id);
    if (::link(from.c_str(), to.c_str()) != 0) {
      const int error = errno;
      for (const std::string& f : placed) ::unlink(f.c_str());
      return error == EEXIST
                 ? Status::AlreadyExists("refusing to replace " + Printable(to))
                 : Status::IOError("cannot link " + Printable(to) +
                                   " into place: " + std::strerror(error));
    }
    placed.push_back(to);
  }
  return Status::OK();
}

// "12.5": a duration in seconds for messages.
std::string FormatSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(d.count()) / 1000);
  return buf;
}

// The parent's wait for the two ranks. The run fails on the first failure
// heard of (a rank's line on the report pipe, a rank that died of a signal
// or exited non-zero), at the deadline, or on a stop signal; then every
// rank still running gets SIGTERM (and SIGCONT, should it be stopped) and,
// kEndGrace later, SIGKILL. The cause is one line naming the rank and its
// side ("rank 0 (sources): <its error>"). A rank's line that only echoes
// the other rank's failure ("aborted by rank N") waits up to kEchoGrace
// for the other rank's own line, which then names the cause instead.
class LiveWait {
 public:
  static constexpr auto kEndGrace = std::chrono::seconds(1);
  static constexpr auto kEchoGrace = std::chrono::seconds(1);

  LiveWait(const pid_t pids[2], int report_fd, Clock::time_point deadline,
           std::chrono::milliseconds timeout)
      : report_fd_(report_fd), deadline_(deadline), timeout_(timeout) {
    for (uint32_t r = 0; r < 2; ++r) ranks_[r].pid = pids[r];
  }

  // Until both ranks are gone. Returns the stop signal noted (0: none).
  int Run() {
    while (ranks_[0].running || ranks_[1].running) {
      pollfd pfd{report_fd_, POLLIN, 0};
      (void)::poll(&pfd, 1, 10);
      const auto now = Clock::now();
      if (g_stop_signal != 0 && stop_ == 0) {
        stop_ = g_stop_signal;
        EndAt(now);
      }
      bool exited[2] = {false, false};
      int status[2] = {0, 0};
      for (uint32_t r = 0; r < 2; ++r) {
        Rank& k = ranks_[r];
        if (!k.running) continue;
        const pid_t got = ::waitpid(k.pid, &status[r], WNOHANG);
        if (got < 0 && errno == ECHILD) {
          // Reaped by someone else: its exit status is unknown.
          k.running = false;
          Hear(RankName(r) + " ended with an unknown exit status", false, now);
          continue;
        }
        if (got != k.pid) continue;
        k.running = false;
        exited[r] = true;
        if (WIFSIGNALED(status[r]) && !k.ended) {
          Hear(RankName(r) + " died of signal " +
                   std::to_string(WTERMSIG(status[r])) + " (" +
                   strsignal(WTERMSIG(status[r])) + ")",
               false, now);
        }
      }
      ReadLines(now);
      for (uint32_t r = 0; r < 2; ++r) {
        if (exited[r] && WIFEXITED(status[r]) && WEXITSTATUS(status[r]) != 0 &&
            !ranks_[r].told) {
          Hear(RankName(r) + " exited with status " +
                   std::to_string(WEXITSTATUS(status[r])),
               false, now);
        }
      }
      if (cause_.empty() && stop_ == 0 && now >= deadline_ &&
          (ranks_[0].running || ranks_[1].running)) {
        std::string running;
        for (uint32_t r = 0; r < 2; ++r) {
          if (!ranks_[r].running) continue;
          running += (running.empty() ? "" : " and ") + RankName(r);
        }
        Hear("the live reshard did not finish within " +
                 FormatSeconds(timeout_) + " s (--timeout); " + running +
                 (ranks_[0].running && ranks_[1].running ? " were" : " was") +
                 " ended",
             false, now);
      }
      End(now);
    }
    return stop_;
  }

  // Why the run failed; empty when both ranks exited cleanly.
  const std::string& cause() const { return cause_; }

 private:
  struct Rank {
    pid_t pid = -1;
    bool running = true;
    bool ended = false;   // sent SIGTERM by the parent
    bool killed = false;  // sent SIGKILL by the parent
    bool told = false;    // its line was read
  };

  void EndAt(Clock::time_point at) {
    if (!end_at_ || at < *end_at_) end_at_ = at;
  }

  // A failure heard of: the first, or a rank's own after an echo.
  void Hear(std::string why, bool echo, Clock::time_point now) {
    if (!cause_.empty() && (!echo_ || echo)) return;
    cause_ = std::move(why);
    echo_ = echo;
    EndAt(echo ? now + kEchoGrace : now);
  }

  // The complete lines on the report pipe.
  void ReadLines(Clock::time_point now) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(report_fd_, buf, sizeof buf)) > 0) {
      pending_.append(buf, static_cast<size_t>(n));
    }
    size_t end;
    while ((end = pending_.find('\n')) != std::string::npos) {
      const std::string line = pending_.substr(0, end);
      pending_.erase(0, end + 1);
      if (line.empty() || (line[0] != '0' && line[0] != '1')) continue;
      const uint32_t r = static_cast<uint32_t>(line[0] - '0');
      const std::string message = line.substr(1);
      ranks_[r].told = true;
      const std::string other = std::to_string(1 - r);
      const bool echo =
          message.find("aborted by rank " + other) != std::string::npos ||
          message.find("decided by rank " + other) != std::string::npos;
      Hear(RankName(r) + ": " + message, echo, now);
    }
  }

  // Ends the ranks still running once end_at_ has come: SIGTERM (with
  // SIGCONT for a stopped one), then SIGKILL after kEndGrace.
  void End(Clock::time_point now) {
    if (!end_at_ || now < *end_at_) return;
    const bool late = now >= *end_at_ + kEndGrace;
    for (Rank& k : ranks_) {
      if (!k.running) continue;
      if (!k.ended) {
        ::kill(k.pid, SIGTERM);
        ::kill(k.pid, SIGCONT);
        k.ended = true;
      } else if (late && !k.killed) {
        ::kill(k.pid, SIGKILL);
        k.killed = true;
      }
    }
  }

  const int report_fd_;
  const Clock::time_point deadline_;
  const std::chrono::milliseconds timeout_;
  Rank ranks_[2];
  std::string pending_;
  std::string cause_;
  bool echo_ = false;
  std::optional<Clock::time_point> end_at_;
  int stop_ = 0;
};

// The body of live rank `r`'s process, forked by MoveLive with the
// parent's signal dispositions: runs the rank, tells the parent why it
// failed, and exits (status 0 when it succeeded).
[[noreturn]] void RunRankProcess(const EngineLayout& source,
                                 const EngineLayout& target,
                                 const EngineReshardArgs& args,
                                 const LiveFiles& files, const int pipe_fds[2],
                                 pid_t parent, uint32_t r) {
  // A rank never outlives the parent (killed, it cannot end the ranks).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) std::_Exit(1);
  ::prctl(PR_SET_NAME, r == 0 ? "reshard-rank0" : "reshard-rank1");
  ::close(pipe_fds[0]);
  // The parent owns stdout (--json); UCX logs to stdout by default.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  bool told = false;
  const auto tell = [&](const Status& s) {
    if (!told) TellParent(pipe_fds[1], r, s);
    told = true;
  };
  EngineReshardReport mine;
  const Status s = LiveRank(source, target, args, files.rendezvous,
                            files.staging, r, tell, &mine);
  if (!s.ok()) tell(s);
  std::fflush(stdout);
  std::_Exit(s.ok() ? 0 : 1);
}

// Forks the two live ranks over a fresh rendezvous directory; rank 1
// writes the target files into a staging directory inside the output
// directory, and the parent links them into place once both ranks exited
// cleanly: a failed, timed-out or stopped run leaves no target file and no
// ".partial". The whole run is bounded by --timeout.
Status MoveLive(const EngineLayout& source, const EngineLayout& target,
                const EngineReshardArgs& args, EngineReshardReport* report) {
  LiveFiles files;
  RESHARD_RETURN_NOT_OK(MakeLiveFiles(args.target_dir, &files));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return Status::IOError(std::string("cannot create a pipe: ") +
                           std::strerror(errno));
  }
  ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  const auto start = Clock::now();
  StopSignals signals;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  pid_t pids[2] = {-1, -1};
  const sigset_t unblocked = StopSignals::Block();
  for (uint32_t r = 0; r < 2; ++r) {
    pids[r] = ::fork();
    if (pids[r] == 0) {
      signals.Restore();
      ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);
      RunRankProcess(source, target, args, files, pipe_fds, parent, r);
    }
    if (pids[r] < 0) {
      const int error = errno;
      if (r == 1) {
        ::kill(pids[0], SIGKILL);
        ::waitpid(pids[0], nullptr, 0);
      }
      ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      return Status::IOError(std::string("fork failed: ") +
                             std::strerror(error));
    }
  }
  ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);
  ::close(pipe_fds[1]);
  LiveWait wait(pids, pipe_fds[0], start + args.timeout, args.timeout);
  int stop = wait.Run();
  ::close(pipe_fds[0]);
  Status placed = Status::OK();
  if (stop == 0 && wait.cause().empty()) {
    // A stop signal from here on waits for every file to be in place.
    placed = PlaceTargets(target, files.staging, args.target_dir);
    if (placed.ok()) files.Keep();
    stop = g_stop_signal;
  }
  if (stop != 0) {
    const bool finished = placed.ok() && wait.cause().empty();
    files.Remove();
    signals.Restore();
    ::raise(stop);  // dies of it, unless the caller handles it
    return Status::Aborted(
        std::string("interrupted by signal ") + std::to_string(stop) + " (" +
        strsignal(stop) + ")" +
        (finished ? " after every target file was in place"
                  : ": both ranks were ended and no target file was written"));
  }
  if (!wait.cause().empty()) return Status::Aborted(wait.cause());
  RESHARD_RETURN_NOT_OK(placed);
  // The target rank wrote the files; count them here.
  for (const EngineParticipant& p : target.participants()) {
    CountPieceBytes(p, &report->bytes, &report->padding_bytes);
    ++report->files;
  }
  return Status::OK();
}

}  // namespace

void CountPieceBytes(const EngineParticipant& participant, uint64_t* bytes,
                     uint64_t* padding_bytes) {
  for (const EngineParameter& q : participant.parameters) {
    for (const ParameterPiece& piece : q.pieces) {
      *(piece.padding() ? padding_bytes : bytes) += piece.nbytes;
    }
  }
}

std::string ParameterFilePath(const std::string& dir,
                              const std::string& participant_id) {
  return dir + "/" + participant_id + ".safetensors";
}

Status CheckOutputDir(const std::string& dir, const EngineLayout& layout,
                      const std::string& participant_id) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const std::string parent =
        std::filesystem::path(dir).lexically_normal().parent_path().string();
    const int missing = errno;
    const std::string up = parent.empty() ? "." : parent;
    if (missing == ENOENT && ::stat(up.c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode)) {
      return Status::OK();  // created when the first file is written
    }
    return Status::IOError(
        "output directory " + Printable(dir) + " cannot be created: " +
        (missing != ENOENT ? std::string(std::strerror(missing))
         : ::stat(up.c_str(), &st) != 0
             ? "its parent " + Printable(up) + " does not exist"
             : "its parent " + Printable(up) + " is not a directory"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(Printable(dir) + " is not a directory");
  }
  for (const EngineParticipant& p : layout.participants()) {
    if (!participant_id.empty() && p.participant_id != participant_id) continue;
    const std::string path = ParameterFilePath(dir, p.participant_id);
    for (const std::string& f : {path, path + ".partial"}) {
      if (::lstat(f.c_str(), &st) == 0) {
        return Status::AlreadyExists(Printable(f) +
                                     " exists: refusing to replace it");
      }
    }
  }
  return Status::OK();
}

Status CreateOutputDir(const std::string& dir, bool* created) {
  const bool made = ::mkdir(dir.c_str(), 0777) == 0;
  if (created != nullptr) *created = made;
  if (!made && errno != EEXIST) {
    return Status::IOError("cannot create output directory " + Printable(dir) +
                           ": " + std::strerror(errno));
  }
  return Status::OK();
}

Result<EngineReshardReport> RunEngineReshard(const EngineLayout& source,
                                             const EngineLayout& target,
                                             const EngineReshardArgs& args) {
  if (args.via != "local" && args.via != "ucx" &&
      args.via.find("://") == std::string::npos) {
    return Status::InvalidArgument(
        "--via must be local, ucx or a weight store URI (fs://DIR, "
        "redis://HOST:PORT/PREFIX), not " +
        Printable(args.via));
  }
  if (!args.convert) {
    // Before any process starts or file is read: one line naming the tensor.
    RESHARD_RETURN_NOT_OK(CheckNoDtypeDifference(
        ConversionPlan::LookupIn(source.placement()), target.placement()));
  }
  RESHARD_RETURN_NOT_OK(CheckOutputDir(args.target_dir, target));
  EngineReshardReport report;
  report.via = args.via;
  if (args.via == "ucx") {
    for (const EngineParticipant& p : source.participants()) {
      for (const EngineParameter& q : p.parameters) {
        report.source_bytes += q.nbytes();
      }
    }
    const auto t0 = Clock::now();
    RESHARD_RETURN_NOT_OK(MoveLive(source, target, args, &report));
    report.seconds = SecondsSince(t0);
    return report;
  }
  RESHARD_ASSIGN_OR_RETURN(Side src,
                           MapSources(source, "engine-reshard", args.source_dir,
                                      args.trust_file_names));
  report.source_bytes = SideBytes(src);
  RESHARD_ASSIGN_OR_RETURN(Side dst, AllocateSide(target, "engine-reshard"));
  const auto t0 = Clock::now();
  if (args.via == "local") {
    RESHARD_RETURN_NOT_OK(MoveLocal(source, src, target, dst, args));
  } else {
    RESHARD_RETURN_NOT_OK(
        MoveThroughStore(source, src, target, dst, args, &report));
  }
  report.seconds = SecondsSince(t0);
  RESHARD_RETURN_NOT_OK(WriteTargets(target, dst, args.target_dir, &report));
  return report;
}

}  // namespace reshard::cli
