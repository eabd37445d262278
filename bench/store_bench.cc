// Weight store benchmark (fs backend): upload a [d0, 4096, 4096] uint8
// tensor (1 GiB by default) from TP4 and load it as TP8 (contiguous) and
// as TP4 split on dim 2 (strided, 1 KiB rows), next to a plain sequential
// write of the same number of bytes (upload) and a plain sequential read
// of the payload files themselves right before each load, in the same run.
// Every load runs `--runs` times cold (pages dropped with posix_fadvise
// after a sync, before the load and before each baseline read) and as
// often warm (the files in the page cache); each run's baseline is the
// mean of a read right before and one right after the load. The table
// shows each run and the min/median/max ratio. Also reports how much the
// resident set grew during each load (the staging bound).
//
// Usage: reshard_bench_store [--d0 N] [--runs N] [--dir PATH]
//                            [--min-scatter-bytes N] [--window-bytes N]
//                            [--case contiguous|strided] [--cache cold|warm]
//                            [--json]
//
// --json prints one JSON object per line instead of the table: the upload
// ({"step":"upload",...}) and every load run ({"step":"load","case":..,
// "cache":"cold"|"warm","run":N,...}), each with its same-run baseline and
// ratio (bench/bench_report.py summarizes them).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "testing/placement_builders.h"

namespace {

using namespace reshard;  // NOLINT
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

WeightPlacementManifest Layout(int64_t tp, int64_t dim, int64_t d0) {
  return testing::CubeLayout(tp, dim, {d0, 4096, 4096});
}

// Reads every payload file under `dir` front to back into `into` (the
// plain sequential read of the same bytes a load reads); GB/s.
double ReadPayloadFiles(const std::string& dir, std::vector<uint8_t>& into) {
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() ||
        e.path().string().find("/payload/") == std::string::npos) {
      continue;
    }
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    uint64_t at = 0;
    while (true) {
      if (into.size() < at + (64 << 20)) into.resize(at + (64 << 20));
      const ssize_t n = ::pread(fd, into.data() + at, 64 << 20, at);
      if (n <= 0) break;
      at += static_cast<uint64_t>(n);
    }
    ::close(fd);
    bytes += at;
  }
  return bytes / Since(t0) / 1e9;
}

// Drops the page cache of every file under `dir` (clean pages only).
void DropCache(const std::string& dir) {
  ::sync();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

uint64_t RssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long pages = 0, rss = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%llu %llu", &pages, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return rss * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Samples the resident set every millisecond while `f` runs; returns the
// largest growth over the resident set before it.
template <typename F>
uint64_t RssGrowthDuring(F&& f) {
  const uint64_t before = RssBytes();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{before};
  std::thread sampler([&] {
    while (!done) {
      const uint64_t now = RssBytes();
      if (now > peak) peak = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  f();
  done = true;
  sampler.join();
  return peak > before ? peak - before : 0;
}

struct Baseline {
  double write_gbps, read_gbps;  // read_gbps: unused by the table
};

Baseline SequentialFile(const std::string& dir, const uint8_t* data,
                        uint64_t bytes) {
  const std::string path = dir + "/baseline.bin";
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (uint64_t at = 0; at < bytes;) {
    const ssize_t n =
        ::write(fd, data + at, std::min<uint64_t>(bytes - at, 64 << 20));
    if (n <= 0) std::abort();
    at += static_cast<uint64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double w = Since(t0);
  DropCache(dir);
  std::vector<uint8_t> into(bytes);
  std::memset(into.data(), 0, bytes);
  t0 = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  for (uint64_t at = 0; at < bytes;) {
    const ssize_t n = ::pread(fd, into.data() + at,
                              std::min<uint64_t>(bytes - at, 64 << 20), at);
    if (n <= 0) std::abort();
    at += static_cast<uint64_t>(n);
  }
  ::close(fd);
  const double r = Since(t0);
  ::unlink(path.c_str());
  return {bytes / w / 1e9, bytes / r / 1e9};
}

struct Args {
  int64_t d0 = 64;
  int runs = 3;
  std::string dir = "/tmp/reshard-store-bench";
  uint64_t min_scatter_bytes = WeightStoreOptions().min_scatter_bytes;
  uint64_t window_bytes = WeightStoreOptions().staged_window_bytes;
  bool json = false;
  std::string only_case;   // "contiguous" or "strided"; empty: both
  std::string only_cache;  // "cold" or "warm"; empty: both
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--d0") && i + 1 < argc) {
      a.d0 = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) {
      a.dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      a.runs = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--min-scatter-bytes") && i + 1 < argc) {
      a.min_scatter_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--window-bytes") && i + 1 < argc) {
      a.window_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      a.only_case = argv[++i];
    } else if (!std::strcmp(argv[i], "--cache") && i + 1 < argc) {
      a.only_cache = argv[++i];
    } else if (!std::strcmp(argv[i], "--json")) {
      a.json = true;
    }
  }
  return a;
}

// Host buffers of `src`, every byte a function of its position.
Result<internal::HostBuffers> FilledSource(const WeightPlacementManifest& src) {
  RESHARD_ASSIGN_OR_RETURN(auto sb,
                           internal::AllocateHostBuffers(src, "bench-source"));
  for (const auto* f : src.fragments()) {
    uint8_t* p = sb.data.at(f->placement_fragment_id());
    for (uint64_t i = 0; i < f->nbytes(); ++i) p[i] = uint8_t(i * 131 + 7);
  }
  return sb;
}

// The plain sequential write and read of `bytes` under `dir`.
Baseline MeasureBaseline(const std::string& dir, uint64_t bytes) {
  // Contiguous baseline data: the first fragment repeated is enough.
  std::vector<uint8_t> plain(bytes);
  std::memset(plain.data(), 0x5A, bytes);
  return SequentialFile(dir, plain.data(), bytes);
}

// Uploads every source binding and commits; the committed manifest and
// the seconds it took.
struct Uploaded {
  double seconds = 0;
  StoredWeightManifest manifest;
};

Result<Uploaded> UploadAndCommit(WeightStore& store,
                                 const WeightPlacementManifest& src,
                                 const internal::HostBuffers& sb) {
  auto t0 = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(auto plan, store.PrepareUpload(src, sb.bindings));
  std::vector<UploadReceipt> receipts;
  for (const auto& b : sb.bindings) {
    RESHARD_ASSIGN_OR_RETURN(auto r, store.Upload(plan, src, b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  RESHARD_RETURN_NOT_OK(store.Commit(plan, receipts));
  const double seconds = Since(t0);
  RESHARD_ASSIGN_OR_RETURN(auto manifest,
                           store.ReadManifest(plan.manifest().manifest_key()));
  return Uploaded{seconds, std::move(manifest)};
}

void PrintHeader(const Args& a, uint64_t bytes, const WeightStore& store) {
  if (a.json) return;
  std::printf(
      "weight store (fs), [%lld, 4096, 4096] uint8 (%.2f GB), staging %llu "
      "MiB, %d cold and %d warm runs per load\n",
      static_cast<long long>(a.d0), bytes / 1e9,
      static_cast<unsigned long long>(store.options().staging_bytes >> 20),
      a.runs, a.runs);
  std::printf("%-44s %8s %10s %14s %7s %12s\n", "step", "seconds", "GB/s",
              "baseline GB/s", "ratio", "RSS growth");
}

struct Case {
  const char* name;
  int64_t tp, dim;
};

// One timed load bracketed by two baseline reads of the payload files
// (one right before, one right after), all cold or all warm; prints one
// row and returns the ratio to the mean of the two reads. The device's
// speed drifts over seconds (cold reads of one file here range from 0.4 to
// 1.7 GB/s), so a single baseline read on one side of the load can favour
// either; the bracket measures the device at the time of the load.
Result<double> LoadOnce(const Args& a, uint64_t bytes, WeightStore& store,
                        const StoredWeightManifest& manifest,
                        const WeightPlacementManifest& dst,
                        const internal::HostBuffers& tb, bool cold,
                        const std::string& label, const Case& c, int run) {
  std::vector<uint8_t> scratch(bytes + (64 << 20));
  std::memset(scratch.data(), 0, scratch.size());
  auto baseline = [&] {
    if (cold) DropCache(a.dir);
    return ReadPayloadFiles(a.dir + "/store", scratch);
  };
  const double before_gbps = baseline();
  if (cold) DropCache(a.dir);
  Result<LoadReport> r = Status::Internal("not run");
  double load = 0;
  const uint64_t grown = RssGrowthDuring([&] {
    const auto t0 = Clock::now();
    r = store.Load(manifest, dst, tb.bindings);
    load = Since(t0);
  });
  RESHARD_RETURN_NOT_OK(r.status());
  const double read_gbps = (before_gbps + baseline()) / 2;
  const double ratio = bytes / load / 1e9 / read_gbps;
  if (a.json) {
    std::printf(
        "{\"step\":\"load\",\"case\":\"%s\",\"cache\":\"%s\",\"run\":%d,"
        "\"bytes\":%llu,\"seconds\":%.4f,\"gbps\":%.3f,"
        "\"baseline_gbps\":%.3f,\"ratio\":%.3f,\"rss_growth_mib\":%.1f}\n",
        c.name, cold ? "cold" : "warm", run, (unsigned long long)bytes, load,
        bytes / load / 1e9, read_gbps, ratio, grown / 1048576.0);
    std::fflush(stdout);
    return ratio;
  }
  char growth[32];
  std::snprintf(growth, sizeof growth, "%.1f MiB", grown / 1048576.0);
  std::printf("%-44s %8.3f %10.2f %14.2f %6.2fx %12s\n", label.c_str(), load,
              bytes / load / 1e9, read_gbps, ratio, growth);
  return ratio;
}

// Loads the revision into the case's layout `runs` times cold and `runs`
// times warm; prints a row per run and the ratios' min/median/max.
Status LoadCase(const Args& a, uint64_t bytes, WeightStore& store,
                const StoredWeightManifest& manifest, const Case& c) {
  auto dst = Layout(c.tp, c.dim, a.d0);
  RESHARD_ASSIGN_OR_RETURN(auto tb,
                           internal::AllocateHostBuffers(dst, "bench-target"));
  for (const auto* f : dst.fragments()) {
    std::memset(tb.data.at(f->placement_fragment_id()), 0, f->nbytes());
  }
  for (const bool cold : {true, false}) {
    if (!a.only_cache.empty() && a.only_cache != (cold ? "cold" : "warm")) {
      continue;
    }
    std::vector<double> ratios;
    for (int run = 1; run <= a.runs; ++run) {
      const std::string label = std::string(c.name) +
                                (cold ? ", cold" : ", warm") + " " +
                                std::to_string(run);
      RESHARD_ASSIGN_OR_RETURN(
          double ratio,
          LoadOnce(a, bytes, store, manifest, dst, tb, cold, label, c, run));
      ratios.push_back(ratio);
    }
    std::sort(ratios.begin(), ratios.end());
    if (a.json) continue;
    std::printf("%-44s %s ratio min %.2fx / median %.2fx / max %.2fx\n", c.name,
                cold ? "cold" : "warm", ratios.front(),
                ratios[ratios.size() / 2], ratios.back());
  }
  return Status::OK();
}

// The whole run; every error is reported by main.
Status Run(const Args& a) {
  std::error_code ec;
  fs::remove_all(a.dir, ec);
  fs::create_directories(a.dir);
  const uint64_t bytes = uint64_t(a.d0) * 4096 * 4096;
  auto src = Layout(4, 0, a.d0);
  RESHARD_ASSIGN_OR_RETURN(auto sb, FilledSource(src));
  const Baseline base = MeasureBaseline(a.dir, bytes);
  WeightStoreOptions options;
  options.min_scatter_bytes = a.min_scatter_bytes;
  options.staged_window_bytes = a.window_bytes;
  RESHARD_ASSIGN_OR_RETURN(
      auto store, WeightStore::Open("fs://" + a.dir + "/store", options));
  RESHARD_ASSIGN_OR_RETURN(Uploaded up, UploadAndCommit(store, src, sb));
  PrintHeader(a, bytes, store);
  if (a.json) {
    std::printf(
        "{\"step\":\"upload\",\"bytes\":%llu,\"seconds\":%.4f,"
        "\"gbps\":%.3f,\"baseline_gbps\":%.3f,\"ratio\":%.3f}\n",
        (unsigned long long)bytes, up.seconds, bytes / up.seconds / 1e9,
        base.write_gbps, bytes / up.seconds / 1e9 / base.write_gbps);
  } else {
    std::printf("%-44s %8.3f %10.2f %14.2f %6.2fx %12s\n",
                "upload TP4 (4 fragments) + commit", up.seconds,
                bytes / up.seconds / 1e9, base.write_gbps,
                bytes / up.seconds / 1e9 / base.write_gbps, "-");
  }
  for (const Case& c : {Case{"load as TP8 dim 0 (contiguous)", 8, 0},
                        Case{"load as TP4 dim 2 (strided)", 4, 2}}) {
    if (!a.only_case.empty() &&
        std::string(c.name).find("(" + a.only_case + ")") ==
            std::string::npos) {
      continue;
    }
    RESHARD_RETURN_NOT_OK(LoadCase(a, bytes, store, up.manifest, c));
  }
  fs::remove_all(a.dir, ec);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  Status st = Run(ParseArgs(argc, argv));
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
