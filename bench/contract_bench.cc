// Contract pipeline benchmark: decode + validate + identify a placement of
// about one million fragments, next to the bare simdjson parse of the same
// bytes measured in the same run.
//
// Usage: reshard_bench_contract [--fragments-scale N] [--repeat R] [--json]

#include <malloc.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "reshard/placement.h"
#include "testing/placement_builders.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); 0 if unknown.
uint64_t StatusKib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoull(line + n + 1, nullptr, 10);
    }
  }
  std::fclose(f);
  return kib;
}

// Resets the peak resident set (VmHWM) to the current one; false if the
// kernel does not allow it.
bool ResetPeakRss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

using ::reshard::bench::Spread;
using ::reshard::bench::SpreadOf;

// An MoE at EP/TP scale: EP64 x TP16 (1,024 participants), each layer with
// 4 grouped expert tensors split on experts and TP, plus dense tensors.
reshard::Result<reshard::WeightPlacementManifest> BuildPlacement(int layers) {
  using namespace reshard::testing;  // NOLINT
  PlacementDraft draft = GridDraft({1, 1, 64, 16});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"w1", "w2", "w3", "gate"}) {
      AddTensor(&draft, {.tensor_id = p + "mlp.experts." + w,
                         .shape = {256, 2048, 7168},
                         .tp_dim = 1,
                         .ep_split = true,
                         .layer_id = l});
    }
    for (const char* w : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      AddTensor(&draft, {.tensor_id = p + "self_attn." + w + ".weight",
                         .shape = {7168, 7168},
                         .tp_dim = 0,
                         .layer_id = l});
    }
    AddTensor(&draft, {.tensor_id = p + "input_layernorm.weight",
                       .shape = {7168},
                       .layer_id = l});
  }
  return draft.Build();
}

// One decode of `wire`, timed from the bytes to the returned manifest.
// Freeing the manifest afterwards is the caller's (a process keeps it while
// it reshards) and is timed on its own, as the parse's DOM is never freed
// between parses (the parser keeps it).
struct PipelineRun {
  double decode = 0;
  double free = 0;
  std::string placement_id;
};

PipelineRun TimePipeline(const std::string& wire) {
  PipelineRun out;
  const auto t0 = Clock::now();
  std::optional<reshard::Result<reshard::WeightPlacementManifest>> m(
      reshard::WeightPlacementFromJson(wire));
  const auto t1 = Clock::now();
  if (!m->ok()) {
    std::fprintf(stderr, "%s\n", m->status().ToString().c_str());
    std::abort();
  }
  out.placement_id = (*m)->placement_id();
  const auto t2 = Clock::now();
  m.reset();
  out.decode = Seconds(t0, t1);
  out.free = Seconds(t2, Clock::now());
  return out;
}

// The allocator keeps what the process frees (no trimming, and blocks up
// to glibc's largest threshold from the heap rather than fresh mappings),
// as a long-running process's allocator does between the placements it
// decodes: each round after the first then reuses memory instead of
// faulting in and zeroing fresh pages, whose cost on a VM varies with the
// host from run to run (the bare parse reuses its parser's buffers alike).
// The first, cold decode is measured apart.
void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

// The timed rounds of (parse, pipeline), the order alternating, so that a
// slow spell of the machine falls on both sides of a round's ratio:
// {parse, pipeline, free, ratio} seconds per round; nullopt when a decode
// does not give `placement_id`. Before them, one cold decode (*cold_seconds)
// whose resident-set peak, less *rss_before_kib (wire, generator, parser),
// is the pipeline's peak (*peak_known false when the kernel cannot reset
// the peak).
std::optional<std::array<std::vector<double>, 4>> RunRounds(
    const std::string& wire, const std::string& placement_id, int repeat,
    double* cold_seconds, uint64_t* rss_before_kib, uint64_t* peak_kib,
    bool* peak_known) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(wire);
  const auto parse = [&] {
    const auto t0 = Clock::now();
    auto doc = parser.parse(padded);
    if (doc.error()) std::abort();
    return Seconds(t0, Clock::now());
  };
  parse();  // the parser's buffers, once: every timed parse reuses them
  *rss_before_kib = StatusKib("VmRSS");
  *peak_known = ResetPeakRss();
  const PipelineRun cold = TimePipeline(wire);
  if (cold.placement_id != placement_id) return std::nullopt;
  *cold_seconds = cold.decode;
  *peak_kib = StatusKib("VmHWM");
  std::array<std::vector<double>, 4> out;
  for (int r = 0; r < repeat; ++r) {
    double parse_s = 0;
    if (r % 2 == 0) parse_s = parse();
    const PipelineRun run = TimePipeline(wire);
    if (r % 2 == 1) parse_s = parse();
    if (run.placement_id != placement_id) return std::nullopt;
    out[0].push_back(parse_s);
    out[1].push_back(run.decode);
    out[2].push_back(run.free);
    out[3].push_back(run.decode / parse_s);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 112;  // 112 layers x 9 tensors x 1,024 ranks = 1,032,192
  int repeat = 9;    // a median of 9 outlasts a slow spell of a few rounds
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    }
  }
  if (repeat < 3) {
    std::fprintf(stderr, "--repeat must be at least 3 (verdicts on medians)\n");
    return 1;
  }
  auto built = BuildPlacement(layers);
  if (!built.ok()) {
    std::fprintf(stderr, "build failed: %s\n",
                 built.status().ToString().c_str());
    return 1;
  }
  const std::string wire = reshard::WeightPlacementToJson(*built);
  const size_t fragments = built->fragments().size();

  KeepFreedMemory();
  double cold_seconds = 0;
  uint64_t rss_before_kib = 0, peak_kib = 0;
  bool peak_known = false;
  const auto rounds =
      RunRounds(wire, built->placement_id(), repeat, &cold_seconds,
                &rss_before_kib, &peak_kib, &peak_known);
  if (!rounds.has_value()) {
    std::fprintf(stderr, "identity mismatch\n");
    return 1;
  }
  const auto& [parses, pipelines, frees, ratios] = *rounds;
  const double peak_mib =
      peak_known ? (peak_kib - rss_before_kib) / 1024.0 : -1;
  const Spread parse_s = SpreadOf(parses), pipeline_s = SpreadOf(pipelines),
               free_s = SpreadOf(frees), ratio = SpreadOf(ratios);
  if (json) {
    std::printf(
        "{\"bytes\":%zu,\"fragments\":%zu,\"rounds\":%d,"
        "\"parse_seconds\":%.4f,\"pipeline_seconds\":%.4f,"
        "\"ratio\":%.2f,\"ratio_min\":%.2f,\"ratio_max\":%.2f,"
        "\"pipeline_peak_rss_mib\":%.1f,\"free_seconds\":%.4f,"
        "\"cold_seconds\":%.4f}\n",
        wire.size(), fragments, repeat, parse_s.median, pipeline_s.median,
        ratio.median, ratio.min, ratio.max, peak_mib, free_s.median,
        cold_seconds);
  } else {
    std::printf(
        "contract pipeline: %zu fragments, %.1f MB of JSON, %d "
        "interleaved rounds (min / median / max)\n",
        fragments, wire.size() / 1e6, repeat);
    std::printf("  bare simdjson parse            %.3f / %.3f / %.3f s\n",
                parse_s.min, parse_s.median, parse_s.max);
    std::printf("  decode+validate+identify       %.3f / %.3f / %.3f s\n",
                pipeline_s.min, pipeline_s.median, pipeline_s.max);
    std::printf("  ratio to the parse             %.2f / %.2f / %.2f x\n",
                ratio.min, ratio.median, ratio.max);
    std::printf(
        "  freeing the manifest afterwards %.3f s median (not "
        "counted)\n",
        free_s.median);
    std::printf("  first (cold) decode, not counted %.3f s\n", cold_seconds);
    if (peak_known) {
      std::printf(
          "  pipeline peak RSS growth (cold) %7.1f MiB (over %.1f MiB "
          "before)\n",
          peak_mib, rss_before_kib / 1024.0);
    }
  }
  return 0;
}
