// Builders of placements for tests and benchmarks: a mutable draft that
// tests can corrupt field by field before building it through the real
// factories, and a grid layout helper (TP/EP/PP/DP) for real-looking
// placements of any size.

#ifndef RESHARD_TESTING_PLACEMENT_BUILDERS_H_
#define RESHARD_TESTING_PLACEMENT_BUILDERS_H_

#include <cstdint>
#include <optional>
#include <string>
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
using TensorLayout = internal::TensorLayout;

// Adds the tensor and one fragment per participant that holds it; aborts
// on a layout that cannot be split (a bug in the test itself).
void AddTensor(PlacementDraft* draft, const TensorLayout& layout);

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

// One binding per participant with fragments: every fragment is a
// contiguous view in its own allocation at distinct fake addresses.
std::vector<WeightRuntimeBindingManifest> FakeBindings(
    const WeightPlacementManifest& placement, uint64_t generation = 1);

// The RuntimeBindingFragmentSpec of FakeBindings for one fragment.
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
