// Builders of placements for tests and benchmarks: a mutable draft that
// tests can corrupt field by field before building it through the real
// factories, and a grid layout helper (TP/EP/PP/DP) for real-looking
// placements of any size.

#ifndef RESHARD_TESTING_PLACEMENT_BUILDERS_H_
#define RESHARD_TESTING_PLACEMENT_BUILDERS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gen/tensor_layout.h"
#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/stored_manifest.h"

namespace reshard::testing {

struct Sizes {
  int64_t dp = 1, pp = 1, ep = 1, tp = 1;
};

// Every input of a placement, still mutable.
struct PlacementDraft {
  PlacementHeader header{"demo-model", "step-1", 1, "demo-set"};
  ParallelTopologySpec topology;
  std::vector<TensorDescriptorSpec> tensors;
  std::vector<PlacementFragmentSpec> fragments;

  // Builds every tensor, fragment and the topology through their factories,
  // then WeightPlacementManifest::FromFragments.
  Result<WeightPlacementManifest> Build() const;
};

// "p-d<dp>-p<pp>-e<ep>-t<tp>".
std::string ParticipantId(const ParallelRank& rank);

// A draft whose topology is the full dp x pp x ep x tp grid.
PlacementDraft GridDraft(Sizes sizes);

// How one tensor is laid out on the grid (shared with the generator).
using TensorLayout = ::reshard::internal::TensorLayout;

// Adds the tensor and one fragment per participant that holds it; aborts
// on a layout that cannot be split (a bug in the test itself).
void AddTensor(PlacementDraft* draft, const TensorLayout& layout);

// An EP16 x TP16 grid of 96 expert tensors [32, 64, 8] (24,576 fragments,
// a wire of more than 4 MiB): large enough for the decoder's two threads.
PlacementDraft LargeExpertDraft();

// The golden scenario pairs of tests/data/scenarios/expected.json that plan
// without error and move at most `max_bytes`, decoded.
struct ScenarioPair {
  std::string name;
  WeightPlacementManifest source;
  WeightPlacementManifest target;
  uint64_t bytes = 0;  // as the reference plans them
  uint64_t regions = 0;
};
std::vector<ScenarioPair> ScenarioPairs(uint64_t max_bytes);

// One uint8 tensor "w" of `shape` split `tp` ways on dimension `dim` (the
// benchmarks' and transfer tests' reshard cube); aborts on invalid input.
WeightPlacementManifest CubeLayout(int64_t tp, int64_t dim, const Dims& shape);

// The store tests' tensor-parallel layout, `dp` replicas of `tp` ranks:
// attn.qkv [64, 48] split on dimension 0, attn.out [32, 96] on dimension
// 1, norm [96] replicated (all bfloat16) and bias [40] float32 on
// dimension 0; aborts on invalid input.
WeightPlacementManifest TpLayout(int64_t dp, int64_t tp);

// The runtime bindings of a placement for tests, built through the real
// factories: one binding per participant with fragments, every fragment a
// contiguous view (FakeRuntimeFragment). Without options, each binding is
// instance "instance-<participant>", generation 1, lease "lease-1", and
// each fragment sits in its own 4 KiB-aligned allocation from 0x10000 in
// its participant's address space.
//
//   auto bindings = BindingBuilder(placement).Instance("dst").Build();
class BindingBuilder {
 public:
  // Edits one fragment's view before it is made; `participant` is its
  // binding's participant id.
  using Adjust = std::function<void(const std::string& participant,
                                    RuntimeBindingFragmentSpec* view)>;

  explicit BindingBuilder(const WeightPlacementManifest& placement)
      : placement_(placement) {}

  // Every binding's instance id.
  BindingBuilder& Instance(std::string instance_id);
  BindingBuilder& Generation(uint64_t generation);
  BindingBuilder& Lease(std::string lease_id);
  // Each binding's lease id from its participant id.
  BindingBuilder& LeaseOf(std::function<std::string(const std::string&)> f);
  // Fragments at base, base + stride, ... in participant, then fragment
  // order, across all bindings.
  BindingBuilder& Addresses(uint64_t base, uint64_t stride);
  // Each fragment at `address_of(fragment)` (caller memory, one shared
  // range ...).
  BindingBuilder& AddressOf(
      std::function<uint64_t(const PlacementFragment&)> address_of);
  // Applied to every view after the address is set (several compose in
  // order).
  BindingBuilder& AdjustEach(Adjust adjust);

  // The bindings, or the error of the first factory that refused a view
  // or binding.
  Result<std::vector<WeightRuntimeBindingManifest>> Build() const;

 private:
  uint64_t NextAddress(const PlacementFragment& f, uint64_t* cursor) const;

  const WeightPlacementManifest& placement_;
  std::optional<std::string> instance_;
  uint64_t generation_ = 1;
  std::function<std::string(const std::string&)> lease_of_;
  std::optional<std::pair<uint64_t, uint64_t>> base_and_stride_;
  std::function<uint64_t(const PlacementFragment&)> address_of_;
  std::vector<Adjust> adjust_;
};

// BindingBuilder(placement).Generation(generation).Build(); aborts on an
// error (a bug in the test).
std::vector<WeightRuntimeBindingManifest> FakeBindings(
    const WeightPlacementManifest& placement, uint64_t generation = 1);

// A contiguous view of `f` at `address` in its own allocation, on worker
// "worker-<participant>", endpoint "endpoint-<participant>", device "cpu".
RuntimeBindingFragmentSpec FakeRuntimeFragment(const PlacementFragment& f,
                                               int64_t itemsize,
                                               uint64_t address);

// The specs that rebuild `f` and `b` through their factories unchanged;
// tests edit a field and build again.
RuntimeBindingFragmentSpec SpecOf(const RuntimeBindingFragment& f);
WeightRuntimeBindingManifestSpec SpecOf(const WeightRuntimeBindingManifest& b);

// What WithBindingChanges replaces; a field left unset keeps the binding's
// own value.
struct BindingChanges {
  std::optional<std::string> device;  // of every fragment
  std::optional<std::string> instance;
  std::optional<std::string> lease;
  std::optional<uint64_t> generation;
  // Added to every fragment's address and storage address.
  uint64_t address_shift = 0;
};

// `binding` with `changes` applied, built again through the factories (so
// an edit they refuse is an error, not a binding).
Result<WeightRuntimeBindingManifest> WithBindingChanges(
    const WeightRuntimeBindingManifest& binding, const BindingChanges& changes);

// A stored manifest holding one complete cover of every tensor of
// `placement` (the first (owner, replica) group in rank order), each
// participant's fragments packed into one payload object.
StoredWeightManifestSpec StoredSpecFrom(
    const WeightPlacementManifest& placement,
    const std::string& group = "ns/rev");

// One legacy runtime inventory per participant of `m` (the runtime_v1
// shape of earlier adapters), views packed into one allocation per
// participant; with `legacy_partition_dim`, a one-dimensional TP split is
// written as `partition_dim` with empty shard_dims, as old adapters did.
std::vector<std::string> LegacyInventories(const WeightPlacementManifest& m,
                                           bool legacy_partition_dim = false);

// Reads a file under tests/data (RESHARD_TEST_DATA).
std::string ReadTestData(const std::string& relative_path);

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_PLACEMENT_BUILDERS_H_
