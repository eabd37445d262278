// A randomized oracle for the planner: random source and target placements
// (TP split on any dimension, EP split or ownership, PP owners, DP replicas
// or owners, replicas sub-tiled into several fragments), then every region
// is executed byte by byte from source buffers into target buffers, and every
// target byte must be written exactly once with the byte of the same global
// element.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "reshard/plan.h"
#include "selftest/selftest.h"
#include "testing/placement_builders.h"
#include "testing/plan_testing.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;
using testing::PlacementDraft;
using testing::Sizes;
using testing::TensorLayout;

struct OracleOptions {
  uint64_t seed = 1;
  int cases = 100;
  double subtile_probability = 0.0;  // per side
  double local_target_probability = 0.0;
  double dp_owner_probability = 0.0;  // per tensor and side
  int64_t max_elements = 4096;        // per tensor
  // Tensors have 1..max_ndim dimensions; past Dims::kInlineDims a box's
  // coordinates live on the heap. Dimensions past the fourth are 1-3 long.
  int64_t max_ndim = 4;
};

class Generator {
 public:
  explicit Generator(const OracleOptions& o) : o_(o), rng_(o.seed) {}

  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool Chance(double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
  }

  Sizes RandomSizes() {
    while (true) {
      Sizes s{Uniform(1, 4), Uniform(1, 4), Uniform(1, 4), Uniform(1, 4)};
      // Mostly small grids, now and then one axis alone.
      if (s.dp * s.pp * s.ep * s.tp <= 16) return s;
    }
  }

  // One random case. Its drafts may still fail validation; the caller then
  // draws another case and counts the rejection.
  struct Case {
    PlacementDraft source;
    PlacementDraft target;
    std::optional<std::string> local_target;
    std::string description;
  };
  Case Make() {
    Case c;
    const Sizes ss = RandomSizes();
    const Sizes ts = RandomSizes();
    c.source = GridDraft(ss);
    c.target = GridDraft(ts);
    auto sizes_str = [](const Sizes& s) {
      return "dp" + std::to_string(s.dp) + "/pp" + std::to_string(s.pp) +
             "/ep" + std::to_string(s.ep) + "/tp" + std::to_string(s.tp);
    };
    c.description = "source " + sizes_str(ss) + ", target " + sizes_str(ts);
    const int ntensors = static_cast<int>(Uniform(1, 3));
    for (int i = 0; i < ntensors; ++i) AddRandomTensor(i, ss, ts, &c);
    if (Chance(o_.subtile_probability)) {
      Subtile(&c.source);
      c.description += "; source subtiled";
    }
    if (Chance(o_.subtile_probability)) {
      Subtile(&c.target);
      c.description += "; target subtiled";
    }
    if (Chance(o_.local_target_probability)) {
      // A local target is a participant that holds fragments (planning
      // for an empty one is an error, tested in planner_test.cc).
      std::vector<std::string> holders;
      for (const auto& p : c.target.topology.participants) {
        for (const auto& f : c.target.fragments) {
          if (f.rank == p.rank) {
            holders.push_back(p.participant_id);
            break;
          }
        }
      }
      c.local_target = holders[Uniform(0, holders.size() - 1)];
      c.description += "; local target " + *c.local_target;
    }
    return c;
  }

 private:
  struct Side {
    int64_t tp_dim = -1;
    bool ep_split = false;
    int64_t pp_owner = -1;
    int64_t ep_owner = -1;
  };

  Side RandomSide(const Sizes& s, size_t ndim, bool expert) {
    Side side;
    if (!expert && Chance(0.4)) side.ep_split = true;
    if (expert && s.ep > 1 && Chance(0.6)) side.ep_owner = Uniform(0, s.ep - 1);
    if (Chance(0.75)) {
      side.tp_dim = Uniform(0, static_cast<int64_t>(ndim) - 1);
      // EP and TP must not split the same dimension.
      if (side.ep_split && side.tp_dim == 0) {
        side.tp_dim =
            ndim > 1 ? Uniform(1, static_cast<int64_t>(ndim) - 1) : -1;
      }
    }
    if (s.pp > 1 && Chance(0.6)) side.pp_owner = Uniform(0, s.pp - 1);
    return side;
  }

  void AddRandomTensor(int index, const Sizes& ss, const Sizes& ts, Case* c) {
    static const std::pair<const char*, int64_t> kTypes[] = {
        {"uint8", 1}, {"bfloat16", 2}, {"float32", 4}};
    while (true) {
      const size_t ndim = static_cast<size_t>(Uniform(1, o_.max_ndim));
      const auto& type = kTypes[Uniform(0, 2)];
      const bool expert = Chance(0.2);
      const Side a = RandomSide(ss, ndim, expert);
      const Side b = RandomSide(ts, ndim, expert);
      // Each dimension must be divisible by every split of it.
      Dims divisor(ndim, 1);
      auto need = [&](size_t d, int64_t k) {
        divisor[d] = std::lcm(divisor[d], k);
      };
      if (a.ep_split) need(0, ss.ep);
      if (b.ep_split) need(0, ts.ep);
      if (a.tp_dim >= 0) need(static_cast<size_t>(a.tp_dim), ss.tp);
      if (b.tp_dim >= 0) need(static_cast<size_t>(b.tp_dim), ts.tp);
      Dims shape(ndim);
      int64_t elements = 1;
      for (size_t d = 0; d < ndim; ++d) {
        const int64_t longest = d < 4 ? 12 : 3;
        shape[d] =
            divisor[d] * Uniform(1, std::max<int64_t>(1, longest / divisor[d]));
        elements *= shape[d];
      }
      if (elements > o_.max_elements) continue;  // draw a smaller tensor
      TensorLayout l;
      l.tensor_id = "t" + std::to_string(index);
      l.shape = shape;
      l.dtype = type.first;
      l.itemsize = type.second;
      if (Chance(0.5)) l.layer_id = index;
      if (expert) l.expert_id = index;
      TensorLayout la = l, lb = l;
      la.tp_dim = a.tp_dim;
      la.ep_split = a.ep_split;
      la.pp_owner = a.pp_owner;
      la.ep_owner = a.ep_owner;
      lb.tp_dim = b.tp_dim;
      lb.ep_split = b.ep_split;
      lb.pp_owner = b.pp_owner;
      lb.ep_owner = b.ep_owner;
      AddTensor(&c->source, la);
      AddTensor(&c->target, lb);
      std::string shape_str;
      for (int64_t e : shape)
        shape_str += (shape_str.empty() ? "" : "x") + std::to_string(e);
      auto side_str = [](const Side& s) {
        return "tp_dim=" + std::to_string(s.tp_dim) +
               (s.ep_split ? ",ep_split" : "") +
               (s.pp_owner >= 0 ? ",pp_owner=" + std::to_string(s.pp_owner)
                                : "") +
               (s.ep_owner >= 0 ? ",ep_owner=" + std::to_string(s.ep_owner)
                                : "");
      };
      c->description += "; " + l.tensor_id + " " + shape_str + " " + l.dtype +
                        " [" + side_str(a) + " -> " + side_str(b) + "]";
      if (Chance(o_.dp_owner_probability)) {
        if (MakeDpOwned(&c->source, l.tensor_id)) {
          c->description += " source dp-owned";
        }
      }
      if (Chance(o_.dp_owner_probability)) {
        if (MakeDpOwned(&c->target, l.tensor_id)) {
          c->description += " target dp-owned";
        }
      }
      return;
    }
  }

  // Turns the DP-replicated tensor `id` into one owned by a random DP rank.
  bool MakeDpOwned(PlacementDraft* d, const std::string& id) {
    if (d->topology.sizes.dp < 2) return false;
    TensorDescriptorSpec* t = nullptr;
    for (auto& x : d->tensors) {
      if (x.tensor_id == id) t = &x;
    }
    for (auto& axis : t->parallel_axes) {
      if (axis.kind() == AxisKind::kDp) axis = OwnershipAxis(AxisKind::kDp);
    }
    const int64_t owner = Uniform(0, d->topology.sizes.dp - 1);
    std::erase_if(d->fragments, [&](const PlacementFragmentSpec& f) {
      return f.tensor_id == id && f.rank.dp != owner;
    });
    return true;
  }

  // Splits about half of the fragments into a grid of sub-boxes (one random
  // cut on some dimensions), independently per participant, so replicas of
  // one box may hold different tilings.
  void Subtile(PlacementDraft* d) {
    std::vector<PlacementFragmentSpec> out;
    for (const auto& f : d->fragments) {
      if (!Chance(0.5)) {
        out.push_back(f);
        continue;
      }
      const size_t n = f.local_shape.size();
      std::vector<std::vector<int64_t>> cuts(n);  // boundaries per dim
      for (size_t k = 0; k < n; ++k) {
        cuts[k] = {0};
        if (f.local_shape[k] > 1 && Chance(0.5)) {
          cuts[k].push_back(Uniform(1, f.local_shape[k] - 1));
        }
        cuts[k].push_back(f.local_shape[k]);
      }
      const uint64_t itemsize =
          f.nbytes / std::accumulate(f.local_shape.begin(), f.local_shape.end(),
                                     uint64_t{1}, [](uint64_t a, int64_t b) {
                                       return a * static_cast<uint64_t>(b);
                                     });
      std::vector<size_t> idx(n, 0);
      while (true) {
        PlacementFragmentSpec p = f;
        p.nbytes = itemsize;
        for (size_t k = 0; k < n; ++k) {
          p.global_offset[k] = f.global_offset[k] + cuts[k][idx[k]];
          p.local_shape[k] = cuts[k][idx[k] + 1] - cuts[k][idx[k]];
          p.nbytes *= static_cast<uint64_t>(p.local_shape[k]);
        }
        out.push_back(std::move(p));
        size_t k = n;
        while (k > 0) {
          --k;
          if (++idx[k] + 1 < cuts[k].size()) break;
          idx[k] = 0;
          if (k == 0) goto done;
        }
        if (n == 0) break;
      }
    done:;
    }
    d->fragments = std::move(out);
  }

  OracleOptions o_;
  std::mt19937_64 rng_;
};

// The tag of one byte: tensor, global element and byte within the element.
uint64_t Tag(uint32_t tensor, uint64_t element, int64_t byte) {
  return (uint64_t{tensor + 1} << 44) | (element << 4) |
         static_cast<uint64_t>(byte);
}

// Calls f(local byte offset, global element index, byte within element) for
// every byte of a canonical row-major fragment.
template <typename F>
void ForEachByte(const PlanFragment& frag, const Dims& global_shape,
                 int64_t itemsize, F&& f) {
  const size_t n = global_shape.size();
  std::vector<uint64_t> gstride(n);
  uint64_t acc = 1;
  for (size_t d = n; d-- > 0;) {
    gstride[d] = acc;
    acc *= static_cast<uint64_t>(global_shape[d]);
  }
  Dims c(n, 0);
  uint64_t local = 0;
  while (true) {
    uint64_t g = 0;
    for (size_t d = 0; d < n; ++d) {
      g += static_cast<uint64_t>(frag.global_offset[d] + c[d]) * gstride[d];
    }
    for (int64_t b = 0; b < itemsize; ++b) f(local++, g, b);
    size_t d = n;
    while (d > 0) {
      --d;
      if (++c[d] < frag.local_shape[d]) break;
      c[d] = 0;
      if (d == 0) return;
    }
  }
}

// Executes the plan byte by byte and checks the targets. Returns false on the
// first failure (already reported).
bool Execute(const LogicalTransferPlan& plan,
             const WeightPlacementManifest& source,
             const WeightPlacementManifest& target,
             const std::optional<std::string>& local) {
  const auto& sf = plan.source_fragments();
  const auto& tf = plan.target_fragments();
  const auto& regions = plan.regions();
  // The plan's targets are exactly the (local) target's fragments.
  std::multiset<std::string> want_targets;
  uint64_t want_bytes = 0;
  for (const auto& part : target.parts()) {
    if (local && part.participant_id() != *local) continue;
    for (const auto& f : part.fragments()) {
      want_targets.insert(f.placement_fragment_id());
      want_bytes += f.nbytes();
    }
  }
  std::multiset<std::string> got_targets;
  for (const auto& f : tf) got_targets.emplace(f.fragment_id);
  EXPECT_EQ(got_targets, want_targets);
  if (got_targets != want_targets) return false;

  std::vector<const TensorDescriptor*> desc;
  for (const auto& id : plan.tensors()) desc.push_back(source.FindTensor(id));

  // Source buffers of the fragments the plan reads.
  std::vector<std::vector<uint64_t>> src(sf.size());
  for (const auto& r : regions) {
    auto& buf = src[r.source_fragment];
    if (!buf.empty()) continue;
    const PlanFragment& f = sf[r.source_fragment];
    buf.resize(f.nbytes);
    const TensorDescriptor& t = *desc[f.tensor];
    ForEachByte(f, t.global_shape(), t.itemsize(),
                [&](uint64_t off, uint64_t g, int64_t b) {
                  buf[off] = Tag(f.tensor, g, b);
                });
  }
  std::vector<std::vector<uint64_t>> dst(tf.size());
  std::vector<std::vector<uint8_t>> writes(tf.size());
  uint64_t region_bytes = 0;
  for (size_t i = 0; i < tf.size(); ++i) {
    dst[i].assign(tf[i].nbytes, 0);
    writes[i].assign(tf[i].nbytes, 0);
  }
  for (const auto& r : regions) {
    region_bytes += r.bytes;
    const auto& s = src[r.source_fragment];
    auto& t = dst[r.target_fragment];
    auto& w = writes[r.target_fragment];
    std::vector<uint64_t> idx(r.loops.size(), 0);
    uint64_t copied = 0;
    while (true) {
      uint64_t so = r.source_base_offset;
      uint64_t to = r.target_base_offset;
      for (size_t k = 0; k < r.loops.size(); ++k) {
        so += idx[k] * r.loops[k].source_stride;
        to += idx[k] * r.loops[k].target_stride;
      }
      if (so + r.inner_bytes > s.size() || to + r.inner_bytes > t.size()) {
        ADD_FAILURE() << "region out of bounds: " << plan.DescribeRegion(r);
        return false;
      }
      for (uint64_t b = 0; b < r.inner_bytes; ++b) {
        t[to + b] = s[so + b];
        ++w[to + b];
      }
      copied += r.inner_bytes;
      size_t k = r.loops.size();
      bool done = k == 0;
      while (k > 0) {
        --k;
        if (++idx[k] < r.loops[k].count) break;
        idx[k] = 0;
        if (k == 0) done = true;
      }
      if (done) break;
    }
    if (copied != r.bytes) {
      ADD_FAILURE() << "region copies " << copied << " bytes, says " << r.bytes
                    << ": " << plan.DescribeRegion(r);
      return false;
    }
  }
  EXPECT_EQ(region_bytes, want_bytes);
  EXPECT_EQ(plan.summary().bytes, want_bytes);
  if (region_bytes != want_bytes) return false;
  for (size_t i = 0; i < tf.size(); ++i) {
    const PlanFragment& f = tf[i];
    const TensorDescriptor& t = *desc[f.tensor];
    bool ok = true;
    ForEachByte(f, t.global_shape(), t.itemsize(),
                [&](uint64_t off, uint64_t g, int64_t b) {
                  if (!ok) return;
                  if (writes[i][off] != 1) {
                    ADD_FAILURE()
                        << "target " << f.fragment_id << " byte " << off
                        << " written " << int(writes[i][off]) << " times";
                    ok = false;
                  } else if (dst[i][off] != Tag(f.tensor, g, b)) {
                    ADD_FAILURE() << "target " << f.fragment_id << " byte "
                                  << off << " holds the wrong byte";
                    ok = false;
                  }
                });
    if (!ok) return false;
  }
  return true;
}

struct OracleStats {
  int executed = 0;
  int regenerated = 0;
  int local = 0;
  int dp_owned = 0;  // cases with a DP-owned source tensor
  int subtiled = 0;  // cases with a sub-tiled side
  uint64_t regions = 0;
  // Regions whose box has more than Dims::kInlineDims dimensions.
  uint64_t high_rank_regions = 0;
  uint64_t multi_loop_regions = 0;
  int selftests = 0;  // cases also run end to end with real bytes
};

OracleStats RunOracle(const OracleOptions& o) {
  Generator gen(o);
  OracleStats st;
  while (st.executed < o.cases) {
    Generator::Case c = gen.Make();
    auto source = c.source.Build();
    auto target = c.target.Build();
    if (!source.ok() || !target.ok()) {
      // A combination the contract rejects: draw again, and count it.
      ++st.regenerated;
      EXPECT_LT(st.regenerated, o.cases / 10 + 10)
          << "generator produces too many invalid drafts; last: "
          << (source.ok() ? target.status() : source.status()).ToString()
          << " (" << c.description << ")";
      if (st.regenerated >= o.cases / 10 + 10) return st;
      continue;
    }
    ++st.executed;
    SCOPED_TRACE("case " + std::to_string(st.executed) + ": " + c.description);
    PlanOptions options;
    options.target_participant_id = c.local_target;
    auto plan = LogicalTransferPlan::Make(*source, *target, options);
    if (!plan.ok()) {
      ADD_FAILURE() << plan.status().ToString();
      return st;
    }
    // Planned on several threads (whatever the size), the same plan.
    options.threads = 2 + st.executed % 3;
    auto parallel = LogicalTransferPlan::Make(*source, *target, options);
    if (!parallel.ok()) {
      ADD_FAILURE() << "planned on " << options.threads
                    << " threads: " << parallel.status().ToString();
      return st;
    }
    {
      SCOPED_TRACE("planned on " + std::to_string(options.threads) +
                   " threads");
      testing::ExpectSamePlan(*parallel, *plan);
    }
    if (::testing::Test::HasFailure()) return st;
    st.local += c.local_target.has_value();
    st.dp_owned += c.description.find("source dp-owned") != std::string::npos;
    st.subtiled += c.description.find("subtiled") != std::string::npos;
    st.regions += plan->regions().size();
    for (const auto& r : plan->regions()) {
      st.multi_loop_regions += r.loops.size() > 1;
      st.high_rank_regions += r.overlap_shape.size() > Dims::kInlineDims;
    }
    if (!Execute(*plan, *source, *target, c.local_target)) return st;
    // The same layouts with real buffers, the binding checks and the local
    // executor (global plans; the self-test plans every target).
    if (!c.local_target.has_value()) {
      auto report =
          RunSelfTest(*source, *target,
                      {.threads = static_cast<uint32_t>(1 + st.executed % 3),
                       .measure_memcpy = false});
      if (!report.ok() || !report->verified) {
        ADD_FAILURE() << "selftest: "
                      << (report.ok() ? report->mismatch
                                      : report.status().ToString());
        return st;
      }
      ++st.selftests;
    }
  }
  ::testing::Test::RecordProperty("regenerated", st.regenerated);
  ::testing::Test::RecordProperty("regions", std::to_string(st.regions));
  ::testing::Test::RecordProperty("multi_loop_regions",
                                  std::to_string(st.multi_loop_regions));
  return st;
}

TEST(PlannerOracleTest, GridLayouts) {
  OracleOptions o;
  o.seed = 0x0a11ce01;
  o.cases = 800;
  const OracleStats st = RunOracle(o);
  EXPECT_EQ(st.executed, o.cases);
  EXPECT_GT(st.regions, 10000u);
  EXPECT_GT(st.multi_loop_regions, 100u);
  EXPECT_EQ(st.selftests, o.cases);  // every case also moved real bytes
}

TEST(PlannerOracleTest, SubtiledReplicas) {
  OracleOptions o;
  o.seed = 0x0a11ce02;
  o.cases = 600;
  o.subtile_probability = 0.7;
  const OracleStats st = RunOracle(o);
  EXPECT_EQ(st.executed, o.cases);
  EXPECT_GT(st.subtiled, o.cases / 2);
  EXPECT_EQ(st.selftests, o.cases);
}

TEST(PlannerOracleTest, LocalTargets) {
  OracleOptions o;
  o.seed = 0x0a11ce03;
  o.cases = 300;
  o.subtile_probability = 0.3;
  o.local_target_probability = 1.0;
  const OracleStats st = RunOracle(o);
  EXPECT_EQ(st.executed, o.cases);
  EXPECT_EQ(st.local, o.cases);
}

// Up to seven dimensions: boxes past Dims::kInlineDims coordinates go
// through planning, binding and the executor on the heap.
TEST(PlannerOracleTest, HighRankTensors) {
  OracleOptions o;
  o.seed = 0x0a11ce05;
  o.cases = 200;
  o.subtile_probability = 0.3;
  o.max_ndim = 7;
  const OracleStats st = RunOracle(o);
  EXPECT_EQ(st.executed, o.cases);
  EXPECT_EQ(st.selftests, o.cases);
  EXPECT_GT(st.multi_loop_regions, 10u);
  EXPECT_GT(st.high_rank_regions, 1000u);
}

TEST(PlannerOracleTest, DpOwnedTensors) {
  OracleOptions o;
  o.seed = 0x0a11ce04;
  o.cases = 300;
  o.subtile_probability = 0.3;
  o.dp_owner_probability = 0.5;
  const OracleStats st = RunOracle(o);
  EXPECT_EQ(st.executed, o.cases);
  EXPECT_GT(st.dp_owned, o.cases / 4);
  EXPECT_EQ(st.selftests, o.cases);
}

}  // namespace
}  // namespace reshard
