#include "tools/engine_reshard.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "reshard/live.h"
#include "reshard/reshard.h"
#include "reshard/weight_store.h"
#include "tools/cli_common.h"
#include "util/printable.h"

namespace reshard::cli {
namespace {

using Clock = std::chrono::steady_clock;
using internal::Printable;

// Every participant's parameters in host memory, bound.
struct Side {
  std::vector<ParameterMemory> memory;
  std::vector<WeightRuntimeBindingManifest> bindings;
};

// Every participant's parameters in host memory from `make`, bound.
Result<Side> BindSide(
    const EngineLayout& layout, const std::string& instance,
    const std::function<Result<ParameterMemory>(const EngineParticipant&)>&
        make) {
  Side side;
  BufferBindingOptions bo;
  bo.instance_id = instance;
  for (const EngineParticipant& p : layout.participants()) {
    RESHARD_ASSIGN_OR_RETURN(auto m, make(p));
    bo.worker_id = p.participant_id;
    RESHARD_ASSIGN_OR_RETURN(
        auto b, BindParameters(layout, p.participant_id, m.buffers(), bo));
    side.memory.push_back(std::move(m));
    side.bindings.push_back(std::move(b));
  }
  return side;
}

Result<Side> AllocateSide(const EngineLayout& layout,
                          const std::string& instance) {
  return BindSide(layout, instance, ParameterMemory::Allocate);
}

// The source participants' parameter files under `dir`, mapped rather
// than read (ParameterMemory::MapFile): the move reads them straight from
// the page cache, and no fresh memory is filled with a copy of them.
Result<Side> MapSources(const EngineLayout& layout, const std::string& instance,
                        const std::string& dir) {
  return BindSide(layout, instance, [&dir](const EngineParticipant& p) {
    return ParameterMemory::MapFile(ParameterFilePath(dir, p.participant_id),
                                    p);
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
  for (size_t i = 0; i < layout.participants().size(); ++i) {
    const EngineParticipant& p = layout.participants()[i];
    CountPieceBytes(p, &report->bytes, &report->padding_bytes);
    RESHARD_RETURN_NOT_OK(ZeroParameterPadding(layout, p.participant_id,
                                               side.memory[i].buffers()));
    RESHARD_RETURN_NOT_OK(WriteParameterFile(
        ParameterFilePath(dir, p.participant_id), p, side.memory[i].buffers()));
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
  return Reshard(source.placement(), src.bindings, target.placement(),
                 dst.bindings, ro)
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
                  src.bindings, quantize));
  RESHARD_RETURN_NOT_OK(q.Quantize(args.threads));
  RESHARD_ASSIGN_OR_RETURN(auto upload,
                           store.PrepareUpload(q.placement(), q.bindings()));
  std::vector<UploadReceipt> receipts;
  for (const auto& b : q.bindings()) {
    RESHARD_ASSIGN_OR_RETURN(auto r, store.Upload(upload, q.placement(), b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  RESHARD_RETURN_NOT_OK(store.Commit(upload, receipts));
  report->manifest_key = upload.manifest().manifest_key();
  RESHARD_ASSIGN_OR_RETURN(auto manifest,
                           store.ReadManifest(report->manifest_key));
  return store.Load(manifest, target.placement(), dst.bindings).status();
}

// One of the two live processes: rank 0 holds every source participant,
// rank 1 every target participant and writes their files.
Status LiveRank(const EngineLayout& source, const EngineLayout& target,
                const EngineReshardArgs& args, const std::string& rendezvous,
                uint32_t rank, EngineReshardReport* report) {
  RESHARD_ASSIGN_OR_RETURN(auto store, OpenRendezvous(rendezvous));
  const std::string session = "engine-reshard";
  // Whatever fails, the other rank learns it at once (not at its timeout).
  auto abort = [&](Status s) {
    (void)AbortLiveSession(*store, session, rank, s);
    return s;
  };
  const std::string instance = "engine-reshard-rank" + std::to_string(rank);
  Side src, dst;
  LiveBindings bindings;
  if (rank == 0) {
    auto side = MapSources(source, instance, args.source_dir);
    if (!side.ok()) return abort(side.status());
    src = std::move(*side);
    bindings.sources = src.bindings;
  } else {
    auto side = AllocateSide(target, instance);
    if (!side.ok()) return abort(side.status());
    dst = std::move(*side);
    bindings.targets = dst.bindings;
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
  if (rank == 1) return WriteTargets(target, dst, args.target_dir, report);
  return Status::OK();
}

// Forks the two live ranks over a fresh rendezvous directory and waits for
// both: the run succeeds only if both exit cleanly.
Status MoveLive(const EngineLayout& source, const EngineLayout& target,
                const EngineReshardArgs& args, EngineReshardReport* report) {
  char tmpl[] = "/tmp/reshard-engine-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    return Status::IOError(std::string("cannot create a rendezvous "
                                       "directory: ") +
                           std::strerror(errno));
  }
  const std::string dir = tmpl;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pids[2] = {-1, -1};
  for (uint32_t r = 0; r < 2; ++r) {
    pids[r] = ::fork();
    if (pids[r] == 0) {
      ::dup2(STDERR_FILENO, STDOUT_FILENO);
      EngineReshardReport mine;
      const Status s = LiveRank(source, target, args, dir, r, &mine);
      if (!s.ok()) std::cerr << "reshard: " << s.message() << "\n";
      std::fflush(stdout);
      std::_Exit(s.ok() ? 0 : 1);
    }
    if (pids[r] < 0) {
      if (r == 1) ::kill(pids[0], SIGKILL);
      std::filesystem::remove_all(dir);
      return Status::IOError(std::string("fork failed: ") +
                             std::strerror(errno));
    }
  }
  std::string failed;
  for (uint32_t r = 0; r < 2; ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed += (failed.empty() ? "" : ", ") + std::string("rank ") +
                std::to_string(r) +
                (WIFSIGNALED(status) ? " was killed by signal " +
                                           std::to_string(WTERMSIG(status))
                                     : " failed");
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!failed.empty()) {
    return Status::Aborted("the live reshard failed: " + failed +
                           " (see above)");
  }
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

Status CreateOutputDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
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
  RESHARD_ASSIGN_OR_RETURN(
      Side src, MapSources(source, "engine-reshard", args.source_dir));
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
