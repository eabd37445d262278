// Planner benchmark: generate training-like and inference-like layouts of
// real models, then time validation (decode + validate + identify of the
// wire) and planning. The baseline measured in the same run is the bare
// simdjson parse of the same placement bytes, so ratios survive noisy
// machines. CPU seconds are process CPU time; wall seconds are elapsed.
//
// Usage: reshard_bench_plan [--models DIR] [--case NAME] [--json]

#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reshard/gen.h"
#include "reshard/placement.h"
#include "reshard/plan.h"

namespace {

using namespace reshard;  // NOLINT

struct Case {
  const char* name;
  const char* model;  // file under the models directory, or "" (synthetic)
  int64_t synthetic_layers;
  LayoutOptions source;
  LayoutOptions target;
};

struct Timing {
  double wall = 0;
  double cpu = 0;
};

template <typename F>
Timing Time(F&& f) {
  const auto w0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  f();
  Timing t;
  t.cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0)
               .count();
  return t;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

LayoutOptions L(int64_t tp, int64_t pp, int64_t ep, int64_t dp) {
  LayoutOptions o;
  o.sizes.tp = tp;
  o.sizes.pp = pp;
  o.sizes.ep = ep;
  o.sizes.dp = dp;
  return o;
}

// Synthetic MoEs sized like the reference comparisons: 16 layers give
// about 16,384 fragments per side of TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4;
// 68 layers give about 65,536 source and, at DP2, 32,768 target fragments.
ModelSpec SyntheticMoe(int64_t layers) {
  ModelSpec m;
  m.name = "synthetic-moe";
  m.layers = layers;
  m.hidden = 1024;
  m.vocab = 32768;
  m.heads = 16;
  m.kv_heads = 8;
  m.head_dim = 64;
  m.qk_norm = true;
  m.experts = 64;
  m.moe_intermediate = 512;
  m.shared_experts = 1;
  m.router_bias = true;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "examples/models";
  std::string only;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--models") && i + 1 < argc) {
      models = argv[++i];
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    }
  }
  const std::vector<Case> cases = {
      {"synthetic-moe-16k", "", 16, L(4, 2, 8, 2), L(8, 4, 2, 4)},
      {"synthetic-moe-64k", "", 68, L(4, 2, 8, 2), L(8, 4, 2, 2)},
      {"qwen3-235b", "qwen3-235b-a22b.json", 0, L(4, 4, 8, 2), L(4, 1, 16, 1)},
      {"deepseek-v3", "deepseek-v3.json", 0, L(8, 4, 16, 2), L(8, 1, 32, 1)},
      {"kimi-k2", "kimi-k2.json", 0, L(8, 8, 16, 2), L(8, 1, 64, 1)},
  };
  if (!json) {
    std::printf("%-18s %9s %9s %10s %10s %9s %10s %10s %8s\n", "case",
                "src frags", "dst frags", "regions", "segments", "parse s",
                "validate s", "plan cpu s", "val/parse");
  }
  for (const Case& c : cases) {
    if (!only.empty() && only != c.name) continue;
    ModelSpec spec;
    if (*c.model == '\0') {
      spec = SyntheticMoe(c.synthetic_layers);
    } else {
      auto parsed = ModelSpecFromJson(ReadAll(models + "/" + c.model));
      if (!parsed.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.model,
                     parsed.status().ToString().c_str());
        return 1;
      }
      spec = *parsed;
    }
    auto src = GenerateLayout(spec, c.source);
    auto dst = GenerateLayout(spec, c.target);
    if (!src.ok() || !dst.ok()) {
      std::fprintf(stderr, "%s: %s %s\n", c.name,
                   src.status().ToString().c_str(),
                   dst.status().ToString().c_str());
      return 1;
    }
    // Validation of both sides from their wire, next to the bare parse.
    const std::string src_wire = WeightPlacementToJson(*src);
    const std::string dst_wire = WeightPlacementToJson(*dst);
    simdjson::dom::parser parser;
    Timing parse = Time([&] {
      for (const auto* w : {&src_wire, &dst_wire}) {
        simdjson::padded_string p(*w);
        if (parser.parse(p).error()) std::abort();
      }
    });
    Timing validate = Time([&] {
      if (!WeightPlacementFromJson(src_wire).ok()) std::abort();
      if (!WeightPlacementFromJson(dst_wire).ok()) std::abort();
    });
    Result<LogicalTransferPlan> plan = Status::Internal("not run");
    Timing planning =
        Time([&] { plan = LogicalTransferPlan::Make(*src, *dst); });
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name,
                   plan.status().ToString().c_str());
      return 1;
    }
    const PlanSummary& s = plan->summary();
    if (json) {
      std::printf(
          "{\"case\":\"%s\",\"source_fragments\":%zu,\"target_fragments\":%zu,"
          "\"regions\":%llu,\"operations\":%llu,\"segments\":%llu,"
          "\"parse_seconds\":%.3f,\"validate_seconds\":%.3f,"
          "\"plan_cpu_seconds\":%.3f,\"plan_wall_seconds\":%.3f,"
          "\"max_source_bytes\":%llu,\"mean_source_bytes\":%.0f}\n",
          c.name, src->fragments().size(), dst->fragments().size(),
          (unsigned long long)s.regions, (unsigned long long)s.operations,
          (unsigned long long)s.segments, parse.wall, validate.wall,
          planning.cpu, planning.wall, (unsigned long long)s.max_source_bytes,
          s.mean_source_bytes);
    } else {
      std::printf("%-18s %9zu %9zu %10llu %10llu %9.3f %10.3f %10.3f %7.1fx\n",
                  c.name, src->fragments().size(), dst->fragments().size(),
                  (unsigned long long)s.regions, (unsigned long long)s.segments,
                  parse.wall, validate.wall, planning.cpu,
                  validate.wall / parse.wall);
    }
    std::fflush(stdout);
  }
  return 0;
}
