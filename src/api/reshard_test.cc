// The entry point end to end: caller buffers bound with BindBuffers and
// resharded with Reshard land byte for byte where the global element index
// says (golden scenarios, strided cubes, tied weights); bad inputs fail
// with exact messages naming the participant and fragment; a plan is
// reused across calls; a stale fence moves nothing.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reshard/api.h"
#include "reshard/backends/local_transport.h"
#include "reshard/plan.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::CubeLayout;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint8_t kUnwritten = 0xD7;

// The byte every layout holds at byte `byte` of global element `element`
// of tensor number `tensor`.
uint8_t ExpectedByte(uint64_t tensor, uint64_t element, uint64_t byte) {
  uint64_t h =
      (element + 1) * 0x9E3779B97F4A7C15ull + tensor * 0x100000001B3ull;
  h ^= h >> 29;
  return static_cast<uint8_t>((h >> (8 * (byte % 8))) + byte / 8);
}

// Calls f(local byte offset, global element index) for every element of
// `f`, in local row-major order.
template <typename F>
void ForEachElement(const TensorDescriptor& t, const PlacementFragment& f,
                    F&& fn) {
  const size_t n = f.local_shape().size();
  Dims idx(n, 0);
  const uint64_t count = f.nbytes() / static_cast<uint64_t>(t.itemsize());
  for (uint64_t local = 0; local < count; ++local) {
    uint64_t global = 0;
    for (size_t d = 0; d < n; ++d) {
      global = global * static_cast<uint64_t>(t.global_shape()[d]) +
               static_cast<uint64_t>(f.global_offset()[d] + idx[d]);
    }
    fn(local * static_cast<uint64_t>(t.itemsize()), global);
    for (size_t d = n; d-- > 0;) {
      if (++idx[d] < f.local_shape()[d]) break;
      idx[d] = 0;
    }
  }
}

// The pattern's tensor number of `f`: the position of its tensor in
// `numbering` (the source placement), tied tensors (one alias group)
// sharing the number of the group's first tensor, as tied weights hold the
// same bytes.
uint64_t TensorNumber(const WeightPlacementManifest& numbering,
                      const PlacementFragment& f) {
  const std::string& id =
      f.aliases().empty() ? f.tensor_id() : f.aliases().front();
  for (size_t i = 0; i < numbering.tensors().size(); ++i) {
    if (numbering.tensors()[i].tensor_id() == id) return i;
  }
  throw std::runtime_error("no tensor " + id);
}

// One placement's caller memory: a vector per fragment, except that
// declared aliases of one participant with the same box share one.
struct Memory {
  explicit Memory(const WeightPlacementManifest& m) : placement(m) {
    std::map<std::string, void*> by_alias;
    for (const auto& part : m.parts()) {
      for (const auto& f : part.fragments()) {
        std::string key;
        if (!f.aliases().empty()) {
          key = part.participant_id() + "|" + f.aliases()[0];
          for (int64_t o : f.global_offset()) key += "," + std::to_string(o);
          for (int64_t e : f.local_shape()) key += "x" + std::to_string(e);
        }
        auto shared = key.empty() ? by_alias.end() : by_alias.find(key);
        if (shared != by_alias.end()) {
          pointers[f.placement_fragment_id()] = shared->second;
          continue;
        }
        auto& bytes = storage[f.placement_fragment_id()];
        bytes.assign(f.nbytes(), kUnwritten);
        pointers[f.placement_fragment_id()] = bytes.data();
        if (!key.empty()) by_alias[key] = bytes.data();
      }
    }
  }

  FragmentBufferLookup Lookup() {
    return [this](std::string_view id) -> void* {
      auto it = pointers.find(std::string(id));
      return it == pointers.end() ? nullptr : it->second;
    };
  }

  std::vector<WeightRuntimeBindingManifest> BindAll(
      const BufferBindingOptions& options = {}) {
    return Must(BindAllBuffers(placement, Lookup(), options)).bindings();
  }

  // Fills every fragment from the global element index. Tensor numbers
  // follow the source placement's order so that both sides agree.
  void Fill(const WeightPlacementManifest& numbering) {
    for (const PlacementFragment* f : placement.fragments()) {
      const TensorDescriptor& t = *placement.FindTensor(f->tensor_id());
      const uint64_t tn = TensorNumber(numbering, *f);
      auto* p = static_cast<uint8_t*>(pointers.at(f->placement_fragment_id()));
      ForEachElement(t, *f, [&](uint64_t local, uint64_t global) {
        for (int64_t b = 0; b < t.itemsize(); ++b) {
          p[local + b] = ExpectedByte(tn, global, b);
        }
      });
    }
  }

  // "" or the first wrong byte of any fragment.
  std::string Mismatch(const WeightPlacementManifest& numbering) const {
    for (const PlacementFragment* f : placement.fragments()) {
      const TensorDescriptor& t = *placement.FindTensor(f->tensor_id());
      const uint64_t tn = TensorNumber(numbering, *f);
      const auto* p =
          static_cast<const uint8_t*>(pointers.at(f->placement_fragment_id()));
      std::string wrong;
      ForEachElement(t, *f, [&](uint64_t local, uint64_t global) {
        for (int64_t b = 0; b < t.itemsize() && wrong.empty(); ++b) {
          if (p[local + b] != ExpectedByte(tn, global, b)) {
            wrong = f->placement_fragment_id() + " element " +
                    std::to_string(global) + " byte " + std::to_string(b);
          }
        }
      });
      if (!wrong.empty()) return wrong;
    }
    return "";
  }

  // True if no byte of any fragment was written.
  bool Untouched() const {
    for (const auto& [id, bytes] : storage) {
      for (uint8_t b : bytes) {
        if (b != kUnwritten) return false;
      }
    }
    return true;
  }

  WeightPlacementManifest placement;
  std::map<std::string, std::vector<uint8_t>> storage;
  std::map<std::string, void*> pointers;
};

// Source and target memory of one reshard, the source filled.
struct Pair {
  Pair(const WeightPlacementManifest& s, const WeightPlacementManifest& t)
      : source(s), target(t) {
    source.Fill(s);
  }
  Memory source;
  Memory target;
};

void ExpectReportMatchesPlan(const ReshardReport& report,
                             const LogicalTransferPlan& plan) {
  EXPECT_EQ(report.bytes, plan.summary().bytes);
  EXPECT_EQ(report.regions, plan.regions().size());
  EXPECT_EQ(report.operations, plan.regions().size());
  EXPECT_EQ(report.segments, plan.summary().segments);
  EXPECT_GE(report.bind_seconds, 0.0);
  EXPECT_GE(report.transfer_seconds, 0.0);
}

// embed and lm_head tied (one alias group), on PP stages 0 and 1 when
// pp > 1.
WeightPlacementManifest Tied(int64_t pp) {
  auto d = GridDraft({1, pp, 1, 1});
  const std::vector<std::string> group = {"embed_tokens.weight",
                                          "lm_head.weight"};
  AddTensor(&d, {.tensor_id = "embed_tokens.weight",
                 .shape = {16, 4},
                 .pp_owner = pp > 1 ? 0 : -1,
                 .aliases = group});
  AddTensor(&d, {.tensor_id = "lm_head.weight",
                 .shape = {16, 4},
                 .pp_owner = pp > 1 ? 1 : -1,
                 .aliases = group});
  return Must(d.Build());
}

// Two PP stages, one tensor on stage 0: stage 1 owns nothing.
WeightPlacementManifest OneStageUsed() {
  auto d = GridDraft({1, 2, 1, 1});
  AddTensor(&d, {.tensor_id = "w", .shape = {8}, .pp_owner = 0});
  return Must(d.Build());
}

TEST(ReshardTest, GoldenScenariosLandByteForByte) {
  const auto pairs = testing::ScenarioPairs(uint64_t{16} << 20);
  ASSERT_GE(pairs.size(), 5u);
  for (const auto& scenario : pairs) {
    SCOPED_TRACE(scenario.name);
    Pair pair(scenario.source, scenario.target);
    ASSERT_OK_AND_ASSIGN(auto report,
                         Reshard(scenario.source, pair.source.BindAll(),
                                 scenario.target, pair.target.BindAll()));
    EXPECT_EQ(report.bytes, scenario.bytes);
    EXPECT_GE(report.plan_seconds, 0.0);
    ExpectReportMatchesPlan(report, Must(LogicalTransferPlan::Make(
                                        scenario.source, scenario.target)));
    EXPECT_EQ(pair.target.Mismatch(scenario.source), "");
  }
}

TEST(ReshardTest, StridedCubesLandByteForByteOnEveryThreadCount) {
  const Dims shape = {4, 6, 12};
  const struct {
    int64_t tp_from, dim_from, tp_to, dim_to;
  } cases[] = {{2, 0, 4, 0}, {2, 0, 3, 1}, {4, 2, 2, 1}, {1, 0, 6, 2}};
  for (const auto& c : cases) {
    for (uint32_t threads : {1u, 3u}) {
      SCOPED_TRACE(::testing::Message()
                   << c.tp_from << "@" << c.dim_from << " -> " << c.tp_to << "@"
                   << c.dim_to << ", threads " << threads);
      const auto source = CubeLayout(c.tp_from, c.dim_from, shape);
      const auto target = CubeLayout(c.tp_to, c.dim_to, shape);
      Pair pair(source, target);
      ASSERT_OK_AND_ASSIGN(
          auto report, Reshard(source, pair.source.BindAll(), target,
                               pair.target.BindAll(), {.threads = threads}));
      ExpectReportMatchesPlan(report,
                              Must(LogicalTransferPlan::Make(source, target)));
      EXPECT_EQ(pair.target.Mismatch(source), "");
    }
  }
}

TEST(ReshardTest, TiedWeightsShareOneBufferOnEitherSide) {
  for (auto [from, to] : {std::pair{2, 1}, {1, 2}, {1, 1}, {2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "pp " << from << " -> " << to);
    const auto source = Tied(from);
    const auto target = Tied(to);
    Pair pair(source, target);
    // On one stage embed and lm_head are one buffer.
    EXPECT_EQ(pair.source.storage.size(), from == 1 ? 1u : 2u);
    EXPECT_EQ(pair.target.storage.size(), to == 1 ? 1u : 2u);
    ASSERT_OK_AND_ASSIGN(auto report, Reshard(source, pair.source.BindAll(),
                                              target, pair.target.BindAll()));
    // Both target views are written, also when they are one buffer.
    EXPECT_EQ(report.bytes, 2u * 16 * 4 * 2);
    EXPECT_EQ(report.operations, 2u);
    EXPECT_EQ(pair.target.Mismatch(source), "");
  }
}

TEST(ReshardTest, TiedFragmentsBindToOneRangeWithTwoRuntimeIds) {
  const auto placement = Tied(1);
  Memory memory(placement);
  ASSERT_EQ(memory.storage.size(), 1u);
  auto binding = Must(BindBuffers(
      placement, placement.parts()[0].participant_id(), memory.pointers));
  ASSERT_EQ(binding.fragments().size(), 2u);
  EXPECT_EQ(binding.fragments()[0].address(), binding.fragments()[1].address());
  EXPECT_NE(binding.fragments()[0].runtime_fragment_id(),
            binding.fragments()[1].runtime_fragment_id());
  EXPECT_OK(ValidateRuntimeBinding(placement, binding));
}

TEST(ReshardTest, BindBuffersFillsEveryBindingField) {
  const auto placement = CubeLayout(2, 1, {2, 4, 3});
  Memory memory(placement);
  const auto& part = placement.parts()[0];
  auto owner = std::make_shared<int>(7);
  BufferBindingOptions options{.instance_id = "trainer-3",
                               .generation = 12,
                               .lease_id = "lease-9",
                               .worker_id = "gpu-host-1",
                               .endpoint = "10.0.0.1:7000",
                               .device = "cpu",
                               .owner = owner};
  auto b = Must(
      BindBuffers(placement, part.participant_id(), memory.Lookup(), options));
  EXPECT_EQ(b.resource_id(), placement.resource_id());
  EXPECT_EQ(b.placement_id(), placement.placement_id());
  EXPECT_EQ(b.placement_digest(), placement.digest());
  EXPECT_EQ(b.revision(), placement.revision());
  EXPECT_EQ(b.instance_id(), "trainer-3");
  EXPECT_EQ(b.generation(), 12u);
  EXPECT_EQ(b.lease_id(), "lease-9");
  EXPECT_EQ(b.participant_id(), part.participant_id());
  ASSERT_EQ(b.fragments().size(), 1u);
  const auto& f = b.fragments()[0];
  const auto& pf = part.fragments()[0];
  EXPECT_EQ(f.placement_fragment_id(), pf.placement_fragment_id());
  EXPECT_EQ(f.runtime_fragment_id(), "trainer-3:" + pf.placement_fragment_id());
  EXPECT_EQ(f.address(), reinterpret_cast<uint64_t>(
                             memory.pointers.at(pf.placement_fragment_id())));
  EXPECT_EQ(f.nbytes(), pf.nbytes());
  EXPECT_EQ(f.worker_id(), "gpu-host-1");
  EXPECT_EQ(f.endpoint(), "10.0.0.1:7000");
  EXPECT_EQ(f.device(), "cpu");
  EXPECT_EQ(f.itemsize(), 1);
  EXPECT_EQ(f.local_shape(), (Dims{2, 2, 3}));
  EXPECT_EQ(f.strides_bytes(), (Dims{6, 3, 1}));
  EXPECT_EQ(f.storage_address(), f.address());
  EXPECT_EQ(f.storage_nbytes(), pf.nbytes());
  EXPECT_EQ(f.storage_offset_bytes(), 0u);
  EXPECT_EQ(f.owner(), owner);
  EXPECT_OK(ValidateRuntimeBinding(placement, b));
  // The map overloads bind the same views.
  std::unordered_map<std::string, void*> unordered(memory.pointers.begin(),
                                                   memory.pointers.end());
  EXPECT_TRUE(
      Must(BindBuffers(placement, part.participant_id(), unordered, options))
          .fragments()[0] == f);
  EXPECT_TRUE(Must(BindBuffers(placement, part.participant_id(),
                               memory.pointers, options))
                  .fragments()[0] == f);
}

TEST(ReshardTest, BindBuffersErrorsNameTheParticipantAndFragment) {
  const auto placement = CubeLayout(2, 0, {4, 2});
  const std::string p0 = placement.parts()[0].participant_id();
  const std::string f0 =
      placement.parts()[0].fragments()[0].placement_fragment_id();
  const std::string prefix = "cannot bind buffers of participant " + p0 + ": ";
  Memory memory(placement);

  auto unknown = BindBuffers(placement, "nobody", memory.pointers);
  EXPECT_TRUE(unknown.status().IsInvalidArgument());
  EXPECT_EQ(unknown.status().message(),
            "cannot bind buffers of participant nobody: not a participant of "
            "placement " +
                placement.placement_id());

  const auto idle = OneStageUsed();
  std::string idle_participant;
  for (const auto& part : idle.parts()) {
    if (part.fragments().empty()) idle_participant = part.participant_id();
  }
  ASSERT_FALSE(idle_participant.empty());
  EXPECT_EQ(
      BindBuffers(idle, idle_participant, memory.pointers).status().message(),
      "cannot bind buffers of participant " + idle_participant +
          ": it owns no fragments and needs no binding");

  std::map<std::string, void*> missing;
  EXPECT_EQ(BindBuffers(placement, p0, missing).status().message(),
            prefix + "no buffer for placement fragment " + f0 + " (tensor w)");

  std::map<std::string, void*> null = {{f0, nullptr}};
  EXPECT_EQ(
      BindBuffers(placement, p0, null).status().message(),
      prefix + "null buffer for placement fragment " + f0 + " (tensor w)");
  auto none = [](std::string_view) -> void* { return nullptr; };
  EXPECT_EQ(
      BindBuffers(placement, p0, none).status().message(),
      prefix + "null buffer for placement fragment " + f0 + " (tensor w)");
  EXPECT_EQ(
      BindBuffers(placement, p0, FragmentBufferLookup()).status().message(),
      prefix + "the buffer lookup is empty");

  EXPECT_EQ(BindBuffers(placement, p0, memory.pointers, {.worker_id = ""})
                .status()
                .message(),
            prefix + "runtime fragment for placement fragment " + f0 +
                ": worker_id must be a non-empty string");

  std::map<std::string, void*> wraps = {
      {f0, reinterpret_cast<void*>(~uintptr_t{0} - 2)}};
  EXPECT_EQ(BindBuffers(placement, p0, wraps).status().message(),
            prefix + "runtime fragment for placement fragment " + f0 +
                ": address + nbytes must fit in an unsigned 64-bit integer");
}

TEST(ReshardTest, OverlappingBuffersOfOneWorkerAreRefused) {
  // Two tensors on one participant, their buffers 8 bytes apart.
  auto d = GridDraft({1, 1, 1, 1});
  AddTensor(&d, {.tensor_id = "a", .shape = {8}});
  AddTensor(&d, {.tensor_id = "b", .shape = {8}});
  const auto placement = Must(d.Build());
  const auto& part = placement.parts()[0];
  std::vector<uint8_t> one(24);
  std::map<std::string, void*> overlapping;
  std::vector<std::string> ids;
  for (const auto& f : part.fragments())
    ids.push_back(f.placement_fragment_id());
  overlapping[ids[0]] = one.data();
  overlapping[ids[1]] = one.data() + 8;
  EXPECT_EQ(BindBuffers(placement, part.participant_id(), overlapping)
                .status()
                .message(),
            "cannot bind buffers of participant " + part.participant_id() +
                ": runtime binding address ranges overlap: " + ids[0] +
                " and " + ids[1] + " (worker local, device cpu)");
}

TEST(ReshardTest, AMissingParticipantIsRefusedBeforePlanning) {
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(4, 1, {4, 4});
  Pair pair(source, target);
  auto targets = pair.target.BindAll();
  const std::string dropped = targets.back().participant_id();
  targets.pop_back();
  auto report = Reshard(source, pair.source.BindAll(), target, targets);
  EXPECT_TRUE(report.status().IsInvalidArgument());
  EXPECT_EQ(report.status().message(),
            "target bindings: missing runtime binding participant: " + dropped);
  auto sources = pair.source.BindAll();
  sources.erase(sources.begin());
  EXPECT_EQ(Reshard(source, sources, target, pair.target.BindAll())
                .status()
                .message(),
            "source bindings: missing runtime binding participant: " +
                source.parts()[0].participant_id());
  EXPECT_TRUE(pair.target.Untouched());
  // Coverage is checked first: a target that cannot be planned from this
  // source reports the missing binding.
  const auto unplannable = CubeLayout(4, 1, {8, 4});
  ASSERT_FALSE(LogicalTransferPlan::Make(source, unplannable).ok());
  EXPECT_EQ(Reshard(source, sources, unplannable, {}).status().message(),
            "source bindings: missing runtime binding participant: " +
                source.parts()[0].participant_id());
}

TEST(ReshardTest, BindAllBuffersNamesTheParticipantWithoutABuffer) {
  const auto placement = CubeLayout(3, 0, {6, 2});
  Memory memory(placement);
  const auto& part = placement.parts()[2];
  const std::string& id = part.fragments()[0].placement_fragment_id();
  memory.pointers.erase(id);
  EXPECT_EQ(BindAllBuffers(placement, memory.Lookup()).status().message(),
            "cannot bind buffers of participant " + part.participant_id() +
                ": null buffer for placement fragment " + id + " (tensor w)");
}

TEST(ReshardTest, BuffersOfTwoParticipantsMustNotOverlap) {
  // One address space for the whole layout: a buffer handed to two
  // participants is found when the bindings meet, by BindAllBuffers (which
  // checks them as one set) or by Reshard (bindings bound one by one).
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(2, 1, {4, 4});
  Memory memory(source);
  void* shared = memory.pointers.begin()->second;
  auto same = [shared](std::string_view) { return shared; };
  EXPECT_THAT(
      BindAllBuffers(source, same).status().message(),
      StartsWith("cannot bind buffers of placement " + source.placement_id() +
                 ": runtime binding address ranges overlap: "));
  std::vector<WeightRuntimeBindingManifest> sources;
  for (const WeightPlacementPart& part : source.parts()) {
    sources.push_back(Must(BindBuffers(source, part.participant_id(), same)));
  }
  Memory dst(target);
  auto report = Reshard(source, sources, target, dst.BindAll());
  EXPECT_THAT(report.status().message(),
              StartsWith("source bindings: runtime binding address ranges "
                         "overlap: "));
  EXPECT_TRUE(dst.Untouched());
}

TEST(ReshardTest, OneTargetParticipantWithPlannedCoverage) {
  const auto source = CubeLayout(2, 0, {4, 6});
  const auto target = CubeLayout(3, 1, {4, 6});
  const std::string only = target.parts()[1].participant_id();
  Pair pair(source, target);
  ReshardOptions options;
  options.plan.target_participant_id = only;
  options.coverage = BindingCoverage::kSubset;
  auto binding = Must(BindBuffers(target, only, pair.target.pointers));
  auto transport = Must(LocalTransport::Make({}));
  ASSERT_OK_AND_ASSIGN(auto report,
                       Reshard(source, pair.source.BindAll(), target, {binding},
                               *transport, options));
  EXPECT_EQ(report.bytes, target.parts()[1].fragments()[0].nbytes());
  // Only that participant's buffer was written, and correctly.
  Memory expected(target);
  expected.Fill(source);
  for (const auto& part : target.parts()) {
    const std::string& id = part.fragments()[0].placement_fragment_id();
    if (part.participant_id() == only) {
      EXPECT_EQ(pair.target.storage.at(id), expected.storage.at(id));
    } else {
      EXPECT_EQ(pair.target.storage.at(id),
                std::vector<uint8_t>(part.fragments()[0].nbytes(), kUnwritten));
    }
  }
  // The same call under every-participant coverage is refused.
  options.coverage = BindingCoverage::kEveryOwner;
  EXPECT_THAT(Reshard(source, pair.source.BindAll(), target, {binding},
                      *transport, options)
                  .status()
                  .message(),
              StartsWith("target bindings: missing runtime binding "
                         "participant: "));
}

TEST(ReshardTest, APlanIsReusedAcrossCallsAndGenerations) {
  const auto source = CubeLayout(4, 0, {8, 4, 6});
  const auto target = CubeLayout(2, 2, {8, 4, 6});
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  auto transport = Must(LocalTransport::Make({.threads = 2}));
  for (uint64_t generation = 1; generation <= 3; ++generation) {
    SCOPED_TRACE(generation);
    // Fresh buffers each step: the plan is address-free, only binding
    // repeats.
    Pair pair(source, target);
    const BufferBindingOptions options{.generation = generation};
    ASSERT_OK_AND_ASSIGN(
        auto report, Reshard(plan, source, pair.source.BindAll(options), target,
                             pair.target.BindAll(options), *transport));
    EXPECT_EQ(report.plan_seconds, 0.0);
    ExpectReportMatchesPlan(report, plan);
    EXPECT_EQ(pair.target.Mismatch(source), "");
  }
}

TEST(ReshardTest, APlanOfOtherPlacementsIsRefused) {
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(4, 1, {4, 4});
  const auto other = CubeLayout(2, 1, {4, 4});
  const auto plan = Must(LogicalTransferPlan::Make(source, other));
  Pair pair(source, target);
  auto transport = Must(LocalTransport::Make({}));
  auto report = Reshard(plan, source, pair.source.BindAll(), target,
                        pair.target.BindAll(), *transport);
  EXPECT_EQ(report.status().message(),
            "logical plan and target placement IDs differ");
  EXPECT_TRUE(pair.target.Untouched());
}

TEST(ReshardTest, AStaleGenerationIsRefusedBeforeAnyByteMoves) {
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(2, 1, {4, 4});
  Pair pair(source, target);
  const auto sources = pair.source.BindAll();
  const auto targets = pair.target.BindAll();
  int fenced = 0;
  ReshardOptions options;
  options.current_bindings = [&]() -> Result<CurrentBindings> {
    ++fenced;
    // The runtime moved on to generation 2 after the plan was bound.
    CurrentBindings now{{}, targets};
    now.sources = pair.source.BindAll({.generation = 2});
    return now;
  };
  auto report = Reshard(source, sources, target, targets, options);
  EXPECT_EQ(fenced, 1);
  EXPECT_TRUE(report.status().IsFailedPrecondition());
  EXPECT_EQ(report.status().message(),
            "acquired runtime binding generation differs from plan: source "
            "participant " +
                source.parts()[0].participant_id() + ": planned 1, current 2");
  EXPECT_TRUE(pair.target.Untouched());
  // A fence that cannot read the current bindings stops the reshard too.
  options.current_bindings = []() -> Result<CurrentBindings> {
    return Status::Unavailable("lease service unreachable");
  };
  EXPECT_EQ(Reshard(source, sources, target, targets, options).status(),
            Status::Unavailable("lease service unreachable"));
  EXPECT_TRUE(pair.target.Untouched());
  // The current bindings unchanged: the reshard goes through.
  options.current_bindings = [&]() -> Result<CurrentBindings> {
    return CurrentBindings{sources, targets};
  };
  ASSERT_OK(Reshard(source, sources, target, targets, options));
  EXPECT_EQ(pair.target.Mismatch(source), "");
}

TEST(ReshardTest, DeviceMemoryIsRefusedByTheLocalTransport) {
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(2, 1, {4, 4});
  Pair pair(source, target);
  auto report = Reshard(source, pair.source.BindAll({.device = "cuda:0"}),
                        target, pair.target.BindAll());
  EXPECT_TRUE(report.status().IsFailedPrecondition());
  EXPECT_THAT(report.status().message(),
              StartsWith("local executor cannot move cuda memory: source "
                         "fragment "));
  EXPECT_TRUE(pair.target.Untouched());
}

TEST(ReshardTest, InPlaceReshardIsRefused) {
  // Target buffers carved out of the source's: one address space, so the
  // overlap is found before anything moves.
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(2, 1, {4, 4});
  Memory src(source);
  std::map<std::string, void*> aliased;
  auto it = src.pointers.begin();
  for (const auto& part : target.parts()) {
    aliased[part.fragments()[0].placement_fragment_id()] = (it++)->second;
  }
  std::vector<WeightRuntimeBindingManifest> targets;
  for (const auto& part : target.parts()) {
    targets.push_back(
        Must(BindBuffers(target, part.participant_id(), aliased)));
  }
  auto report = Reshard(source, src.BindAll(), target, targets);
  EXPECT_THAT(report.status().message(),
              ::testing::AllOf(
                  StartsWith("source and target runtime storage allocations "
                             "overlap"),
                  HasSubstr("in-place reshard is unsupported")));
}

TEST(ReshardTest, PlanningErrorsComeThroughUnchanged) {
  const auto source = CubeLayout(2, 0, {4, 4});
  const auto target = CubeLayout(2, 0, {8, 4});
  Pair pair(source, target);
  auto report =
      Reshard(source, pair.source.BindAll(), target, pair.target.BindAll());
  const Status planned = LogicalTransferPlan::Make(source, target).status();
  ASSERT_FALSE(planned.ok());
  EXPECT_EQ(report.status(), planned);
}

}  // namespace
}  // namespace reshard
