// Planner benchmark: generate training-like and inference-like layouts of
// real models, then time validation (decode + validate + identify of the
// wire) and planning. The baseline measured in the same run is the bare
// simdjson parse of the same placement bytes, so ratios survive noisy
// machines. CPU seconds are process CPU time; wall seconds are elapsed.
//
// Usage: reshard_bench_plan [--models DIR] [--case NAME] [--rounds N] [--json]
//        (N >= 3 rounds, the bare parse first and last in turn; medians
//        under the plain JSON names, _min and _max beside them)
//        reshard_bench_plan --parse-files FILE... (the bare simdjson read
//        and parse of each file, nothing else: bench/cli_bench.py's
//        whole-process baseline for `reshard plan` and `validate`)

#include <simdjson.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
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

struct Args {
  std::string models = "examples/models";
  std::string only;  // run only the case of this name
  bool json = false;
  int rounds = 3;  // at least 3: figures are judged on their medians
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--models") && i + 1 < argc) {
      a.models = argv[++i];
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      a.only = argv[++i];
    } else if (!std::strcmp(argv[i], "--json")) {
      a.json = true;
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      a.rounds = std::max(3, std::atoi(argv[++i]));
    }
  }
  return a;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"synthetic-moe-16k", "", 16, L(4, 2, 8, 2), L(8, 4, 2, 4)},
      {"synthetic-moe-64k", "", 68, L(4, 2, 8, 2), L(8, 4, 2, 2)},
      {"qwen3-235b", "qwen3-235b-a22b.json", 0, L(4, 4, 8, 2), L(4, 1, 16, 1)},
      {"deepseek-v3", "deepseek-v3.json", 0, L(8, 4, 16, 2), L(8, 1, 32, 1)},
      {"kimi-k2", "kimi-k2.json", 0, L(8, 8, 16, 2), L(8, 1, 64, 1)},
  };
  return cases;
}

Result<ModelSpec> CaseModel(const Case& c, const std::string& models) {
  if (*c.model == '\0') return SyntheticMoe(c.synthetic_layers);
  auto parsed = ModelSpecFromJson(ReadAll(models + "/" + c.model));
  if (!parsed.ok()) {
    return Status::InvalidArgument(std::string(c.model) + ": " +
                                   parsed.status().ToString());
  }
  return parsed;
}

using ::reshard::bench::Spread;
using ::reshard::bench::SpreadOf;

// What one case measured, over the rounds.
struct CaseResult {
  size_t source_fragments = 0;
  size_t target_fragments = 0;
  int rounds = 0;
  Spread parse, validate, validate_parallel, plan_cpu, plan_wall;
  PlanSummary summary;
  uint64_t digest = 0;
};

// XXH3 of everything a plan holds (fragment tables and every region field,
// in order): equal digests across builds mean identical plans.
uint64_t PlanDigest(const LogicalTransferPlan& plan) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add = [&](const void* p, size_t n) { XXH3_64bits_update(st, p, n); };
  auto num = [&](uint64_t v) { add(&v, sizeof(v)); };
  auto str = [&](std::string_view v) {
    num(v.size());
    add(v.data(), v.size());
  };
  auto dims = [&](const Dims& d) {
    num(d.size());
    for (int64_t v : d) num(static_cast<uint64_t>(v));
  };
  for (const auto* side :
       {&plan.source_fragments(), &plan.target_fragments()}) {
    num(side->size());
    for (const PlanFragment& f : *side) {
      str(f.fragment_id);
      str(f.participant_id);
      for (int64_t v : {f.rank.dp, f.rank.tp, f.rank.pp, f.rank.ep}) num(v);
      num(f.pipeline_stage_id.value_or(-1));
      num(f.tensor);
      dims(f.global_offset);
      dims(f.local_shape);
      num(f.nbytes);
      num(f.participant);
      num(f.order);
    }
  }
  for (const TransferRegion& r : plan.regions()) {
    for (uint64_t v : {uint64_t{r.tensor}, uint64_t{r.source_fragment},
                       uint64_t{r.target_fragment}}) {
      num(v);
    }
    dims(r.overlap_offset);
    dims(r.overlap_shape);
    for (uint64_t v : {r.source_base_offset, r.target_base_offset,
                       r.inner_bytes, r.segments, r.bytes}) {
      num(v);
    }
    num(r.loops.size());
    for (const OuterLoop& l : r.loops) {
      for (uint64_t v : {l.count, l.source_stride, l.target_stride}) num(v);
    }
  }
  const uint64_t digest = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return digest;
}

// One round of a case: the bare parse, the validation of both wires (one
// thread, then two), the planning; `parse_last` moves the parse after the
// others (rounds alternate, so a slow spell falls on both sides).
struct Round {
  Timing parse, validate, validate_parallel, planning;
  PlanSummary summary;
  uint64_t digest = 0;
};

Result<Round> RunRound(const Case& c, const WeightPlacementManifest& src,
                       const WeightPlacementManifest& dst,
                       const std::string& src_wire, const std::string& dst_wire,
                       bool parse_last) {
  Round out;
  simdjson::dom::parser parser;
  const auto parse = [&] {
    out.parse = Time([&] {
      for (const auto* w : {&src_wire, &dst_wire}) {
        simdjson::padded_string p(*w);
        if (parser.parse(p).error()) std::abort();
      }
    });
  };
  if (!parse_last) parse();
  out.validate = Time([&] {
    if (!WeightPlacementFromJson(src_wire).ok()) std::abort();
    if (!WeightPlacementFromJson(dst_wire).ok()) std::abort();
  });
  // The same on two threads, one side each (as `reshard plan` and
  // `reshard selftest` decode a pair).
  out.validate_parallel = Time([&] {
    auto target = std::async(std::launch::async,
                             [&] { return WeightPlacementFromJson(dst_wire); });
    if (!WeightPlacementFromJson(src_wire).ok()) std::abort();
    if (!target.get().ok()) std::abort();
  });
  Result<LogicalTransferPlan> plan = Status::Internal("not run");
  // One core, as the rows say (the command's two threads are cli_bench's).
  PlanOptions one_core;
  one_core.threads = 1;
  // A plan ready to execute: its regions in step 7's order (which the
  // plan establishes at their first reading).
  out.planning = Time([&] {
    plan = LogicalTransferPlan::Make(src, dst, one_core);
    if (plan.ok()) (void)plan->regions();
  });
  if (!plan.ok()) {
    return Status::Internal(std::string(c.name) + ": " +
                            plan.status().ToString());
  }
  out.summary = plan->summary();
  out.digest = PlanDigest(*plan);
  if (parse_last) parse();
  return out;
}

// Generates both layouts, then times `rounds` rounds of the bare parse, the
// validation of both wires and the planning; every round's plan must be
// the same.
Result<CaseResult> RunCase(const Case& c, const std::string& models,
                           int rounds) {
  RESHARD_ASSIGN_OR_RETURN(ModelSpec spec, CaseModel(c, models));
  auto src = GenerateLayout(spec, c.source);
  auto dst = GenerateLayout(spec, c.target);
  if (!src.ok() || !dst.ok()) {
    return Status::InvalidArgument(std::string(c.name) + ": " +
                                   src.status().ToString() + " " +
                                   dst.status().ToString());
  }
  CaseResult out;
  out.source_fragments = src->fragments().size();
  out.target_fragments = dst->fragments().size();
  out.rounds = rounds;
  const std::string src_wire = WeightPlacementToJson(*src);
  const std::string dst_wire = WeightPlacementToJson(*dst);
  std::vector<double> parse, validate, parallel, cpu, wall;
  for (int r = 0; r < rounds; ++r) {
    RESHARD_ASSIGN_OR_RETURN(
        Round round, RunRound(c, *src, *dst, src_wire, dst_wire, r % 2 == 1));
    if (r > 0 && round.digest != out.digest) {
      return Status::Internal(std::string(c.name) +
                              ": plans differ between rounds");
    }
    out.digest = round.digest;
    out.summary = round.summary;
    parse.push_back(round.parse.wall);
    validate.push_back(round.validate.wall);
    parallel.push_back(round.validate_parallel.wall);
    cpu.push_back(round.planning.cpu);
    wall.push_back(round.planning.wall);
  }
  out.parse = SpreadOf(parse);
  out.validate = SpreadOf(validate);
  out.validate_parallel = SpreadOf(parallel);
  out.plan_cpu = SpreadOf(cpu);
  out.plan_wall = SpreadOf(wall);
  return out;
}

void PrintHeader() {
  std::printf("%-18s %9s %9s %10s %10s %9s %10s %10s %10s %8s %16s\n", "case",
              "src frags", "dst frags", "regions", "segments", "parse s",
              "validate s", "val 2thr s", "plan cpu s", "val/parse",
              "plan digest");
}

void PrintRow(const Case& c, const CaseResult& r) {
  const PlanSummary& s = r.summary;
  std::printf(
      "%-18s %9zu %9zu %10llu %10llu %9.3f %10.3f %10.3f %10.3f %7.1fx "
      "%016llx\n",
      c.name, r.source_fragments, r.target_fragments,
      (unsigned long long)s.regions, (unsigned long long)s.segments,
      r.parse.median, r.validate.median, r.validate_parallel.median,
      r.plan_cpu.median, r.validate.median / r.parse.median,
      (unsigned long long)r.digest);
}

void PrintJson(const Case& c, const CaseResult& r) {
  const PlanSummary& s = r.summary;
  // Medians under the plain names; each figure's min and max beside.
  std::string spreads;
  for (const auto& [name, v] :
       {std::pair<const char*, const Spread*>{"parse_seconds", &r.parse},
        {"validate_seconds", &r.validate},
        {"validate_two_threads_seconds", &r.validate_parallel},
        {"plan_cpu_seconds", &r.plan_cpu},
        {"plan_wall_seconds", &r.plan_wall}}) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "\"%s\":%.3f,\"%s_min\":%.3f,"
                  "\"%s_max\":%.3f,",
                  name, v->median, name, v->min, name, v->max);
    spreads += buf;
  }
  std::printf(
      "{\"case\":\"%s\",\"rounds\":%d,\"source_fragments\":%zu,"
      "\"target_fragments\":%zu,\"regions\":%llu,\"operations\":%llu,"
      "\"segments\":%llu,%s\"max_source_bytes\":%llu,"
      "\"mean_source_bytes\":%.0f,\"plan_digest\":\"%016llx\"}\n",
      c.name, r.rounds, r.source_fragments, r.target_fragments,
      (unsigned long long)s.regions, (unsigned long long)s.operations,
      (unsigned long long)s.segments, spreads.c_str(),
      (unsigned long long)s.max_source_bytes, s.mean_source_bytes,
      (unsigned long long)r.digest);
}

}  // namespace

// Reads and parses each file as a bare simdjson user would; 1 on error.
int ParseFiles(int argc, char** argv) {
  simdjson::dom::parser parser;
  for (int i = 2; i < argc; ++i) {
    simdjson::padded_string text;
    simdjson::dom::element root;
    if (simdjson::padded_string::load(argv[i]).get(text) ||
        parser.parse(text).get(root)) {
      std::fprintf(stderr, "%s: cannot read or parse\n", argv[i]);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--parse-files")) {
    return ParseFiles(argc, argv);
  }
  const Args args = ParseArgs(argc, argv);
  if (!args.json) PrintHeader();
  for (const Case& c : Cases()) {
    if (!args.only.empty() && args.only != c.name) continue;
    auto r = RunCase(c, args.models, args.rounds);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return 1;
    }
    if (args.json) {
      PrintJson(c, *r);
    } else {
      PrintRow(c, *r);
    }
    std::fflush(stdout);
  }
  return 0;
}
