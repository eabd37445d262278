// The local executor: CopyRegionSegments against a brute-force expansion of
// random strided regions, and LocalTransport end to end on real host
// buffers (every target byte checked against a pattern derived from the
// global element index), for several thread counts and chunk sizes.

#include "reshard/backends/local_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bind/row_walker.h"
#include "reshard/binding.h"
#include "reshard/bound_plan.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::internal::CopyRegionSegments;
using ::reshard::testing::AddTensor;
using ::reshard::testing::BindingBuilder;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;
using ::reshard::testing::PlacementDraft;
using ::reshard::testing::Sizes;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TensorLayout;
using ::testing::ElementsAre;

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The value of byte `byte` of global element `element` of tensor `tensor`.
uint8_t Pattern(uint64_t tensor, uint64_t element, uint64_t byte) {
  return static_cast<uint8_t>(Mix((tensor << 48) ^ (element * 16 + byte)));
}

// ---------------------------------------------------------------------------
// CopyRegionSegments.

uint64_t RowsOf(const BoundRegion& r) {
  uint64_t n = 1;
  for (const auto& l : r.loops) n *= l.count;
  return n;
}

// Bytes spanned by one side of a region (offset of the last byte + 1).
uint64_t Extent(const BoundRegion& r, bool source) {
  uint64_t e = r.inner_bytes;
  for (const auto& l : r.loops) {
    e += (l.count - 1) * (source ? l.source_stride : l.target_stride);
  }
  return e;
}

// The reference: row `row` (outer loops, last fastest) copied on its own.
void BruteForceRows(const BoundRegion& r, uint64_t first, uint64_t count,
                    const uint8_t* src_base, uint8_t* dst_base) {
  for (uint64_t row = first; row < first + count; ++row) {
    uint64_t rest = row;
    uint64_t s = 0;
    uint64_t t = 0;
    for (size_t d = r.loops.size(); d-- > 0;) {
      const uint64_t i = rest % r.loops[d].count;
      rest /= r.loops[d].count;
      s += i * r.loops[d].source_stride;
      t += i * r.loops[d].target_stride;
    }
    std::memcpy(dst_base + t, src_base + s, r.inner_bytes);
  }
}

// Strides of one side: the loops nest in a random order of magnitude, each
// stride at least the span of the loops inside it (so no two rows overlap),
// with random gaps.
void AssignStrides(std::mt19937_64& rng, BoundRegion* r, bool source) {
  const size_t n = r->loops.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;  // innermost first
  if (rng() % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
  uint64_t span = r->inner_bytes;
  for (size_t k = 0; k < n; ++k) {
    OuterLoop& l = r->loops[order[k]];
    const uint64_t gap = rng() % 2 == 0 ? 0 : rng() % 17;
    const uint64_t stride = span + gap;
    (source ? l.source_stride : l.target_stride) = stride;
    span = stride * l.count;
  }
}

struct RegionCase {
  BoundRegion region;
  std::vector<uint8_t> source;
  std::vector<uint8_t> target;    // filled by CopyRegionSegments
  std::vector<uint8_t> expected;  // filled by the brute force
};

constexpr uint64_t kGuard = 32;
constexpr uint8_t kFill = 0xA5;

// Buffers with guard bytes on both sides; the region's addresses point
// past the leading guard.
RegionCase MakeCase(std::mt19937_64& rng, BoundRegion r) {
  RegionCase c;
  c.source.resize(Extent(r, true) + 2 * kGuard);
  for (size_t i = 0; i < c.source.size(); ++i) {
    c.source[i] = static_cast<uint8_t>(Mix(i ^ rng()));
  }
  c.target.assign(Extent(r, false) + 2 * kGuard, kFill);
  c.expected = c.target;
  r.source_address = reinterpret_cast<uint64_t>(c.source.data() + kGuard);
  r.target_address = reinterpret_cast<uint64_t>(c.target.data() + kGuard);
  c.region = std::move(r);
  return c;
}

TEST(CopyRegionTest, MatchesBruteForceOnRandomRegions) {
  std::mt19937_64 rng(20260723);
  size_t partial = 0;
  size_t full = 0;
  for (int iter = 0; iter < 500; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    BoundRegion r;
    r.inner_bytes = 1 + rng() % 64;
    const size_t n = rng() % 5;  // 0..4 loops
    for (size_t d = 0; d < n; ++d) {
      r.loops.push_back({1 + rng() % 6, 0, 0});
    }
    AssignStrides(rng, &r, true);
    AssignStrides(rng, &r, false);
    const uint64_t rows = RowsOf(r);
    r.bytes = rows * r.inner_bytes;
    RegionCase c = MakeCase(rng, r);
    const uint8_t* src_base = c.source.data() + kGuard;
    uint8_t* exp_base = c.expected.data() + kGuard;
    if (rng() % 4 == 0) {
      // One random sub-range only: the other rows stay untouched.
      const uint64_t first = rng() % rows;
      const uint64_t count = rng() % (rows - first + 1);
      CopyRegionSegments(c.region, first, count);
      BruteForceRows(c.region, first, count, src_base, exp_base);
      ++partial;
    } else {
      // A random partition of [0, rows), executed in random order, with
      // empty ranges in between.
      std::vector<uint64_t> cuts = {0, rows};
      const size_t k = rng() % 5;
      for (size_t i = 0; i < k; ++i) cuts.push_back(rng() % (rows + 1));
      std::sort(cuts.begin(), cuts.end());
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        ranges.emplace_back(cuts[i], cuts[i + 1] - cuts[i]);
      }
      std::shuffle(ranges.begin(), ranges.end(), rng);
      for (const auto& [first, count] : ranges) {
        CopyRegionSegments(c.region, first, count);
      }
      BruteForceRows(c.region, 0, rows, src_base, exp_base);
      ++full;
    }
    ASSERT_EQ(c.target, c.expected) << "inner_bytes " << c.region.inner_bytes
                                    << ", loops " << c.region.loops.size();
  }
  EXPECT_GT(partial, 50u);
  EXPECT_GT(full, 300u);
}

TEST(CopyRegionTest, NoLoopsCopiesOneRun) {
  std::mt19937_64 rng(1);
  BoundRegion r;
  r.inner_bytes = 37;
  r.bytes = 37;
  RegionCase c = MakeCase(rng, r);
  CopyRegionSegments(c.region, 0, 0);
  EXPECT_EQ(c.target, c.expected);  // nothing copied
  CopyRegionSegments(c.region, 0, 1);
  BruteForceRows(c.region, 0, 1, c.source.data() + kGuard,
                 c.expected.data() + kGuard);
  EXPECT_EQ(c.target, c.expected);
  EXPECT_EQ(c.target[kGuard - 1], kFill);
  EXPECT_EQ(c.target[kGuard + 37], kFill);
}

TEST(CopyRegionTest, ManyLoopsUseTheHeapIndex) {
  // More than 16 loops (the index leaves its stack array), mixing count-1
  // and count-2 loops.
  std::mt19937_64 rng(2);
  BoundRegion r;
  r.inner_bytes = 3;
  for (int d = 0; d < 20; ++d) r.loops.push_back({d % 3 == 0 ? 1u : 2u, 0, 0});
  AssignStrides(rng, &r, true);
  AssignStrides(rng, &r, false);
  const uint64_t rows = RowsOf(r);
  ASSERT_EQ(rows, 1u << 13);
  RegionCase c = MakeCase(rng, r);
  CopyRegionSegments(c.region, 0, 1000);
  CopyRegionSegments(c.region, 1000, rows - 1000);
  BruteForceRows(c.region, 0, rows, c.source.data() + kGuard,
                 c.expected.data() + kGuard);
  EXPECT_EQ(c.target, c.expected);
}

// ---------------------------------------------------------------------------
// LocalTransport on real plans and real buffers.

// Host memory for every fragment of a placement, and the bindings that
// describe it (one per participant with fragments).
struct HostSide {
  std::map<std::string, std::vector<uint8_t>> data;  // by fragment id
  std::vector<WeightRuntimeBindingManifest> bindings;
};

HostSide Allocate(const WeightPlacementManifest& m, const std::string& instance,
                  uint8_t fill, const std::string& device = "cpu") {
  HostSide side;
  side.bindings = Must(
      BindingBuilder(m)
          .Instance(instance)
          .AddressOf([&](const PlacementFragment& f) {
            auto& buf = side.data[f.placement_fragment_id()];
            buf.assign(f.nbytes(), fill);
            return reinterpret_cast<uint64_t>(buf.data());
          })
          .AdjustEach([&](const std::string&, RuntimeBindingFragmentSpec* v) {
            v->device = device;
          })
          .Build());
  return side;
}

// Calls f(local element index, global element index) for every element of
// a fragment, in local row-major order.
template <typename F>
void ForEachElement(const Dims& global_shape, const PlacementFragment& frag,
                    F&& f) {
  const Dims& off = frag.global_offset();
  const Dims& shape = frag.local_shape();
  const size_t n = shape.size();
  Dims idx(n, 0);
  for (uint64_t local = 0;; ++local) {
    uint64_t g = 0;
    for (size_t d = 0; d < n; ++d) {
      g = g * static_cast<uint64_t>(global_shape[d]) +
          static_cast<uint64_t>(off[d] + idx[d]);
    }
    f(local, g);
    size_t d = n;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (n == 0) return;
  }
}

uint64_t TensorIndex(const WeightPlacementManifest& m, const std::string& id) {
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    if (m.tensors()[i].tensor_id() == id) return i;
  }
  throw std::runtime_error("unknown tensor " + id);
}

void FillSources(const WeightPlacementManifest& m, HostSide* side) {
  for (const auto* f : m.fragments()) {
    const TensorDescriptor* t = m.FindTensor(f->tensor_id());
    const uint64_t ti = TensorIndex(m, f->tensor_id());
    const auto item = static_cast<uint64_t>(t->itemsize());
    uint8_t* p = side->data.at(f->placement_fragment_id()).data();
    ForEachElement(t->global_shape(), *f, [&](uint64_t local, uint64_t g) {
      for (uint64_t b = 0; b < item; ++b)
        p[local * item + b] = Pattern(ti, g, b);
    });
  }
}

// Checks every byte of every target fragment; reports the first mismatch
// of each fragment. Tensor indices follow the source's order.
void ExpectTargets(const WeightPlacementManifest& source,
                   const WeightPlacementManifest& target,
                   const HostSide& side) {
  for (const auto* f : target.fragments()) {
    const TensorDescriptor* t = target.FindTensor(f->tensor_id());
    const uint64_t ti = TensorIndex(source, f->tensor_id());
    const auto item = static_cast<uint64_t>(t->itemsize());
    const auto& buf = side.data.at(f->placement_fragment_id());
    ASSERT_EQ(buf.size(), f->nbytes());
    bool failed = false;
    ForEachElement(t->global_shape(), *f, [&](uint64_t local, uint64_t g) {
      for (uint64_t b = 0; b < item && !failed; ++b) {
        const uint8_t want = Pattern(ti, g, b);
        const uint8_t got = buf[local * item + b];
        if (got != want) {
          failed = true;
          ADD_FAILURE() << "tensor " << f->tensor_id() << ", fragment "
                        << f->placement_fragment_id() << ", element " << g
                        << ", byte " << b << ": expected " << int(want)
                        << ", got " << int(got);
        }
      }
    });
  }
}

struct Layouts {
  WeightPlacementManifest source;
  WeightPlacementManifest target;
};

// TP4 -> DP2 x TP2 with cross-dimension changes: multi-row regions with one
// and two loops (inner runs of 8 to 48 bytes), large contiguous runs (10 KB
// single-row regions) and a replicated source tensor.
Layouts MixedLayouts() {
  auto tensors = [](PlacementDraft* d, bool target) {
    TensorLayout a{.tensor_id = "attn.q", .shape = {64, 48}};
    a.tp_dim = target ? 1 : 0;
    AddTensor(d, a);
    TensorLayout cube{.tensor_id = "cube", .shape = {16, 32, 8}};
    cube.tp_dim = target ? 2 : 1;
    AddTensor(d, cube);
    TensorLayout scale{.tensor_id = "scale",
                       .shape = {8, 12, 16},
                       .dtype = "float32",
                       .itemsize = 4};
    scale.tp_dim = target ? 0 : 2;
    AddTensor(d, scale);
    TensorLayout embed{.tensor_id = "embed",
                       .shape = {40000},
                       .dtype = "uint8",
                       .itemsize = 1};
    embed.tp_dim = 0;
    AddTensor(d, embed);
    TensorLayout norm{.tensor_id = "norm", .shape = {1000}};
    norm.tp_dim = target ? 0 : -1;
    AddTensor(d, norm);
  };
  PlacementDraft s = GridDraft(Sizes{.tp = 4});
  tensors(&s, false);
  PlacementDraft t = GridDraft(Sizes{.dp = 2, .tp = 2});
  tensors(&t, true);
  return {Must(s.Build()), Must(t.Build())};
}

std::unique_ptr<LocalTransport> MustMake(LocalTransportOptions o) {
  return Must(LocalTransport::Make(o));
}

template <typename T>
std::string ErrorOf(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.status().message();
}

TEST(LocalTransportTest, MakeValidatesOptions) {
  auto zero_threads = LocalTransport::Make({.threads = 0});
  ASSERT_THAT(zero_threads, StatusIs(StatusCode::kInvalidArgument,
                                     "local transport threads must be >= 1"));
  auto zero_chunk = LocalTransport::Make({.chunk_bytes = 0});
  ASSERT_FALSE(zero_chunk.ok());
  EXPECT_EQ(zero_chunk.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(zero_chunk),
            "local transport chunk_bytes and max_in_flight must be >= 1");
  auto zero_in_flight = LocalTransport::Make({.max_in_flight = 0});
  EXPECT_EQ(ErrorOf(zero_in_flight),
            "local transport chunk_bytes and max_in_flight must be >= 1");
  EXPECT_OK(LocalTransport::Make({}));
}

TEST(LocalTransportTest, Capabilities) {
  auto t = MustMake({.threads = 3, .max_in_flight = 7});
  const TransportCapabilities& caps = t->capabilities();
  EXPECT_EQ(caps.name, "local");
  EXPECT_THAT(caps.memory_kinds, ElementsAre(MemoryKind::kHost));
  EXPECT_EQ(caps.max_in_flight, 7u);
}

// A binding's device is never ignored: CUDA memory or a device kind this
// build does not know is refused before a byte moves (it used to be copied
// as if the pointer were host memory).
TEST(LocalTransportTest, RefusesMemoryKindsItCannotMove) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  for (const std::string device : {"cuda:0", "cuda", "npu:1", "CPU"}) {
    HostSide dst = Allocate(l.target, "host", 0xEE, device);
    const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
        plan, l.source, src.bindings, l.target, dst.bindings));
    auto transport = MustMake({.threads = 2});
    auto id = transport->Submit(bound);
    ASSERT_FALSE(id.ok()) << device;
    EXPECT_EQ(id.status().code(), StatusCode::kFailedPrecondition);
    const std::string kind =
        device.starts_with("cuda") ? "cuda memory" : "unknown memory kind";
    EXPECT_THAT(id.status().message(),
                ::testing::AllOf(
                    ::testing::StartsWith("local executor cannot move " + kind +
                                          ": target fragment sha256:"),
                    ::testing::EndsWith("(device \"" + device + "\")")));
    for (const auto& [fid, buf] : dst.data) {
      EXPECT_TRUE(std::all_of(buf.begin(), buf.end(),
                              [](uint8_t b) { return b == 0xEE; }));
    }
  }
}

TEST(LocalTransportTest, SubmitWaitPollMovesEveryByte) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  const HostSide src_before = src;
  HostSide dst = Allocate(l.target, "host", 0xEE);
  const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst.bindings));
  EXPECT_EQ(bound.bytes(), plan.summary().bytes);
  EXPECT_EQ(bound.bytes(), 2u * (64 * 48 * 2 + 16 * 32 * 8 * 2 +
                                 8 * 12 * 16 * 4 + 40000 + 1000 * 2));
  // The plan has multi-row regions with one and two loops and large
  // single-row runs.
  size_t two_loops = 0;
  size_t big_runs = 0;
  for (const BoundRegion& r : bound.regions()) {
    two_loops += r.loops.size() == 2;
    big_runs += r.loops.empty() && r.inner_bytes >= 10000;
  }
  EXPECT_GT(two_loops, 0u);
  EXPECT_GT(big_runs, 0u);

  auto transport = MustMake({.threads = 2});
  const TransferId id = Must(transport->Submit(bound));
  auto polled = transport->Poll(id);
  ASSERT_OK(polled);
  EXPECT_TRUE(*polled == TransferState::kPending ||
              *polled == TransferState::kCompleted);
  ASSERT_OK(transport->Wait(id));
  polled = transport->Poll(id);
  ASSERT_OK(polled);
  EXPECT_EQ(*polled, TransferState::kCompleted);
  // Waiting again on a completed transfer is fine.
  EXPECT_OK(transport->Wait(id));
  ExpectTargets(l.source, l.target, dst);
  EXPECT_EQ(src.data, src_before.data);  // sources are only read

  // Transfer ids are fresh per submission.
  for (auto& [id_, buf] : dst.data) std::fill(buf.begin(), buf.end(), 0xEE);
  const TransferId id2 = Must(transport->Submit(bound));
  EXPECT_NE(id2, id);
  ASSERT_OK(transport->Wait(id2));
  ExpectTargets(l.source, l.target, dst);
}

TEST(LocalTransportTest, ResultsIdenticalForThreadsAndChunkSizes) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  HostSide dst = Allocate(l.target, "host", 0);
  const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst.bindings));
  std::map<std::string, std::vector<uint8_t>> first;
  for (uint32_t threads : {1u, 2u, 8u}) {
    for (uint64_t chunk : {uint64_t{1}, uint64_t{7}, uint64_t{24}, uint64_t{64},
                           uint64_t{4} << 20}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", chunk_bytes " +
                   std::to_string(chunk));
      for (auto& [id, buf] : dst.data) {
        std::fill(buf.begin(), buf.end(),
                  static_cast<uint8_t>(threads + chunk));
      }
      auto transport = MustMake({.threads = threads, .chunk_bytes = chunk});
      const TransferId id = Must(transport->Submit(bound));
      ASSERT_OK(transport->Wait(id));
      ExpectTargets(l.source, l.target, dst);
      if (first.empty()) {
        first = dst.data;
      } else {
        EXPECT_TRUE(dst.data == first);
      }
    }
  }
}

TEST(LocalTransportTest, RebindAfterAddressChangeWritesTheNewBuffers) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  HostSide dst1 = Allocate(l.target, "host", 0x11);
  HostSide dst2 = Allocate(l.target, "host", 0x22);
  const BoundTransferPlan b1 = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst1.bindings));
  auto transport = MustMake({.threads = 2, .chunk_bytes = 256});
  ASSERT_OK(transport->Wait(Must(transport->Submit(b1))));
  ExpectTargets(l.source, l.target, dst1);
  // The same logical plan bound to the new target buffers: only they
  // change.
  for (auto& [id, buf] : dst1.data) std::fill(buf.begin(), buf.end(), 0x33);
  const auto dst1_before = dst1.data;
  const BoundTransferPlan b2 = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst2.bindings));
  ASSERT_OK(transport->Wait(Must(transport->Submit(b2))));
  ExpectTargets(l.source, l.target, dst2);
  EXPECT_TRUE(dst1.data == dst1_before);
}

TEST(LocalTransportTest, ConcurrentTransfersToDistinctTargets) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  std::vector<HostSide> dsts;
  for (int i = 0; i < 4; ++i) dsts.push_back(Allocate(l.target, "host", 0x5A));
  std::vector<BoundTransferPlan> bound;
  for (const auto& d : dsts) {
    bound.push_back(Must(BoundTransferPlan::Bind(plan, l.source, src.bindings,
                                                 l.target, d.bindings)));
  }
  auto transport =
      MustMake({.threads = 2, .chunk_bytes = 512, .max_in_flight = 4});
  std::vector<TransferId> ids;
  for (const auto& b : bound) ids.push_back(Must(transport->Submit(b)));
  for (TransferId id : ids) ASSERT_OK(transport->Wait(id));
  for (const auto& d : dsts) ExpectTargets(l.source, l.target, d);
}

TEST(LocalTransportTest, UnknownTransfer) {
  auto transport = MustMake({});
  auto polled = transport->Poll(42);
  ASSERT_THAT(polled, StatusIs(StatusCode::kNotFound, "unknown transfer 42"));
  const Status waited = transport->Wait(42);
  EXPECT_THAT(waited, StatusIs(StatusCode::kNotFound, "unknown transfer 42"));
}

// One tensor [rows, 4] uint8 split over TP4 on dim 1 -> TP1: four regions of
// `rows` one-byte rows each, slow on purpose.
Layouts SlowLayouts(int64_t rows) {
  TensorLayout x{
      .tensor_id = "slow", .shape = {rows, 4}, .dtype = "uint8", .itemsize = 1};
  PlacementDraft s = GridDraft(Sizes{.tp = 4});
  x.tp_dim = 1;
  AddTensor(&s, x);
  PlacementDraft t = GridDraft(Sizes{});
  x.tp_dim = -1;
  AddTensor(&t, x);
  return {Must(s.Build()), Must(t.Build())};
}

TEST(LocalTransportTest, MaxInFlightCountsPendingTransfersOnly) {
  const Layouts l = SlowLayouts(int64_t{1} << 21);
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  ASSERT_EQ(plan.regions().size(), 4u);
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  HostSide dst = Allocate(l.target, "host", 0);
  const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst.bindings));
  auto transport = MustMake({.threads = 1, .max_in_flight = 1});
  // Completed transfers do not count against the limit.
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(transport->Wait(Must(transport->Submit(bound))));
  }
  // While the first transfer is pending, a second is refused. Whether it is
  // still pending when the second Submit runs is up to the scheduler, so
  // the refusal is asserted only when a Poll after that Submit still sees
  // the first pending (states only move forward, so it was pending then).
  int observed = 0;
  for (int attempt = 0; attempt < 5 && observed == 0; ++attempt) {
    const TransferId first = Must(transport->Submit(bound));
    auto second = transport->Submit(bound);
    ASSERT_OK_AND_ASSIGN(auto state, transport->Poll(first));
    if (state == TransferState::kPending) {
      ++observed;
      ASSERT_FALSE(second.ok()) << "second transfer accepted while the first "
                                   "was pending (max_in_flight 1)";
      EXPECT_THAT(
          second,
          StatusIs(
              StatusCode::kResourceExhausted,
              "local transport has 1 transfers in flight (max_in_flight 1)"));
    }
    ASSERT_OK(transport->Wait(first));
    if (second.ok()) {
      ASSERT_OK(transport->Wait(*second));
    }
  }
  if (observed == 0) {
    // Not a failure: the machine finished every transfer before it could be
    // observed pending.
    std::printf("[ NOTE ] max_in_flight refusal not observed\n");
  }
  // After the pending transfer completes, new work is accepted again.
  ASSERT_OK(transport->Wait(Must(transport->Submit(bound))));
  ExpectTargets(l.source, l.target, dst);
}

// The caller may drop its BoundTransferPlan after Submit (transport.h):
// only the buffers must stay.
TEST(LocalTransportTest, SubmitKeepsWhatItNeedsOfThePlan) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  HostSide dst = Allocate(l.target, "host", 0x77);
  auto transport = MustMake({.threads = 2, .chunk_bytes = 64});
  TransferId id;
  {
    const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
        plan, l.source, src.bindings, l.target, dst.bindings));
    id = Must(transport->Submit(bound));
  }
  ASSERT_OK(transport->Wait(id));
  ExpectTargets(l.source, l.target, dst);
}

TEST(LocalTransportTest, DestructorFinishesTransfersInFlight) {
  const Layouts l = MixedLayouts();
  const auto plan = Must(LogicalTransferPlan::Make(l.source, l.target));
  HostSide src = Allocate(l.source, "host", 0);
  FillSources(l.source, &src);
  HostSide dst = Allocate(l.target, "host", 0x77);
  const BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, l.source, src.bindings, l.target, dst.bindings));
  {
    auto transport = MustMake({.threads = 2, .chunk_bytes = 64});
    Must(transport->Submit(bound));
  }
  ExpectTargets(l.source, l.target, dst);
}

}  // namespace
}  // namespace reshard
