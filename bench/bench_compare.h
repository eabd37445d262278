// What the benchmarks that time one path against a baseline of the same
// run share (cuda_bench.cc, cuda_ipc_bench.cc, m2n_bench.cc): the
// [--rounds N] [--json] flags, the timing of one run, the interleaved
// rounds, the baseline copy on a device and the printed table and JSON
// lines. ratio = baseline ms / measured ms, both medians.

#ifndef RESHARD_BENCH_BENCH_COMPARE_H_
#define RESHARD_BENCH_BENCH_COMPARE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "exec_cuda/device_api.h"
#include "reshard/status.h"

namespace reshard::bench {

struct CompareFlags {
  int rounds = 10;
  bool json = false;
};

// The flags over their defaults in `flags`, or a usage line on stderr and
// false.
inline bool ParseCompareFlags(int argc, char** argv, CompareFlags* flags) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      flags->rounds = std::atoi(argv[++i]);
      if (flags->rounds >= 1) continue;
    } else if (!std::strcmp(argv[i], "--json")) {
      flags->json = true;
      continue;
    }
    std::fprintf(stderr, "usage: %s [--rounds N (N >= 1)] [--json]\n", argv[0]);
    return false;
  }
  return true;
}

// The line a benchmark prints, exiting 0, on a machine without a CUDA
// device; `built`: whether this build has the CUDA backend.
inline void PrintNoDevice(const char* benchmark, bool built) {
  std::printf("%s: no CUDA device on this machine%s; nothing measured\n",
              benchmark, built ? "" : " (this build has no CUDA backend)");
}

// Milliseconds `run` took, or its error.
inline Result<double> TimeMs(const std::function<Status()>& run) {
  const auto t0 = std::chrono::steady_clock::now();
  RESHARD_RETURN_NOT_OK(run());
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// One case's figures: the measured path and its baseline.
struct Comparison {
  std::string name;
  uint64_t bytes = 0;
  Spread measured_ms, baseline_ms;
  double ratio() const { return baseline_ms.median / measured_ms.median; }
};

// One untimed run of the baseline and of the measured path, then `rounds`
// interleaved rounds (baseline, measured, baseline, ...); the first error
// ends it. Name and bytes are the caller's to fill.
inline Result<Comparison> MeasureInterleaved(
    const std::function<Status()>& baseline,
    const std::function<Status()>& measured, int rounds) {
  RESHARD_RETURN_NOT_OK(baseline());
  RESHARD_RETURN_NOT_OK(measured());
  std::vector<double> base_ms, measured_ms;
  for (int round = 0; round < rounds; ++round) {
    RESHARD_ASSIGN_OR_RETURN(const double b, TimeMs(baseline));
    RESHARD_ASSIGN_OR_RETURN(const double m, TimeMs(measured));
    base_ms.push_back(b);
    measured_ms.push_back(m);
  }
  Comparison result;
  result.baseline_ms = SpreadOf(base_ms);
  result.measured_ms = SpreadOf(measured_ms);
  return result;
}

// The baseline copy: `bytes` from `src` to `dst` as copies of height 1
// (one per MaxPitch bytes), then the stream's synchronisation.
inline Status ContiguousCopy(cuda::DeviceApi& api, void* dst, const void* src,
                             uint64_t bytes, cuda::CopyKind kind,
                             cuda::StreamHandle stream) {
  const uint64_t chunk = api.MaxPitch();
  for (uint64_t at = 0; at < bytes; at += chunk) {
    const size_t n = static_cast<size_t>(std::min(chunk, bytes - at));
    RESHARD_RETURN_NOT_OK(api.Copy2DAsync(static_cast<char*>(dst) + at, n,
                                          static_cast<const char*>(src) + at, n,
                                          n, 1, kind, stream));
  }
  return api.SynchronizeStream(stream);
}

// How a comparison table names its columns and judges its ratio.
struct CompareTable {
  std::string title;     // the first line, before a blank one
  std::string measured;  // the measured column ("reshard": "reshard ms")
  std::string baseline;  // the baseline column ("baseline")
  double goal = 0;       // ratio >= goal is "met"
};

// The markdown table of `results` and, with `json`, one JSON object per
// case (keys "<measured>_ms", "<measured>_ms_min", ..., "rounds").
inline std::string ComparisonReport(const CompareTable& t,
                                    const std::vector<Comparison>& results,
                                    int rounds, bool json) {
  std::string out = t.title + "\n\n| case | bytes | " + t.measured + " ms | " +
                    t.baseline +
                    " ms | ratio | goal | met |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  char line[1024];
  for (const Comparison& r : results) {
    std::snprintf(line, sizeof line,
                  "| %s | %llu | %.3f | %.3f | %.3f | >= %.1f | %s |\n",
                  r.name.c_str(), static_cast<unsigned long long>(r.bytes),
                  r.measured_ms.median, r.baseline_ms.median, r.ratio(), t.goal,
                  r.ratio() >= t.goal ? "met" : "not met");
    out += line;
  }
  if (!json) return out;
  const char* m = t.measured.c_str();
  const char* b = t.baseline.c_str();
  for (const Comparison& r : results) {
    std::snprintf(line, sizeof line,
                  "{\"case\": \"%s\", \"bytes\": %llu, \"%s_ms\": %.4f, "
                  "\"%s_ms_min\": %.4f, \"%s_ms_max\": %.4f, \"%s_ms\": %.4f, "
                  "\"%s_ms_min\": %.4f, \"%s_ms_max\": %.4f, \"ratio\": %.4f, "
                  "\"goal\": %.1f, \"met\": %s, \"rounds\": %d}\n",
                  r.name.c_str(), static_cast<unsigned long long>(r.bytes), m,
                  r.measured_ms.median, m, r.measured_ms.min, m,
                  r.measured_ms.max, b, r.baseline_ms.median, b,
                  r.baseline_ms.min, b, r.baseline_ms.max, r.ratio(), t.goal,
                  r.ratio() >= t.goal ? "true" : "false", rounds);
    out += line;
  }
  return out;
}

}  // namespace reshard::bench

#endif  // RESHARD_BENCH_BENCH_COMPARE_H_
