// The runtime binding contract: where the live bytes of a placement's
// fragments are. One WeightRuntimeBindingManifest per live participant that
// owns fragments; it attests the placement's id and digest and carries the
// generation and lease that fence execution.

#ifndef RESHARD_BINDING_H_
#define RESHARD_BINDING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

struct RuntimeBindingFragmentSpec {
  std::string placement_fragment_id;
  // The runtime's own id for this view (wire field "fragment_id").
  std::string runtime_fragment_id;
  uint64_t address = 0;  // first transferable byte; 0 is reserved
  uint64_t nbytes = 0;
  std::string worker_id;
  std::string endpoint;  // routing only, never an address space
  std::string device;
  int64_t itemsize = 0;
  Dims local_shape;
  Dims strides_bytes;
  uint64_t storage_address = 0;
  uint64_t storage_nbytes = 0;
  uint64_t storage_offset_bytes = 0;
  // Keeps a framework allocation alive; never compared or serialised.
  std::shared_ptr<void> owner;
};

// One physical view of one placement fragment.
class RuntimeBindingFragment {
 public:
  // Checks the address arithmetic on its own (non-zero addresses, u64
  // exclusive ends, address == storage_address + storage_offset_bytes, view
  // inside the allocation, stride 0 only on extent-1 dimensions) and
  // rewrites the strides of extent-1 dimensions to their canonical values.
  static Result<RuntimeBindingFragment> Make(RuntimeBindingFragmentSpec spec);

  const std::string& placement_fragment_id() const {
    return s_.placement_fragment_id;
  }
  // The runtime's own id for this view (wire field "fragment_id").
  const std::string& runtime_fragment_id() const {
    return s_.runtime_fragment_id;
  }
  uint64_t address() const { return s_.address; }
  uint64_t nbytes() const { return s_.nbytes; }
  const std::string& worker_id() const { return s_.worker_id; }
  const std::string& endpoint() const { return s_.endpoint; }
  const std::string& device() const { return s_.device; }
  int64_t itemsize() const { return s_.itemsize; }
  const Dims& local_shape() const { return s_.local_shape; }
  const Dims& strides_bytes() const { return s_.strides_bytes; }
  uint64_t storage_address() const { return s_.storage_address; }
  uint64_t storage_nbytes() const { return s_.storage_nbytes; }
  uint64_t storage_offset_bytes() const { return s_.storage_offset_bytes; }
  const std::shared_ptr<void>& owner() const { return s_.owner; }

  // Equality over every physical field; the owner is ignored.
  friend bool operator==(const RuntimeBindingFragment& a,
                         const RuntimeBindingFragment& b);

 private:
  explicit RuntimeBindingFragment(RuntimeBindingFragmentSpec s)
      : s_(std::move(s)) {}
  RuntimeBindingFragmentSpec s_;
};

struct WeightRuntimeBindingManifestSpec {
  std::string resource_id;
  std::string placement_id;
  std::string placement_digest;  // 64 lowercase hex
  std::string instance_id;
  uint64_t generation = 0;
  std::string lease_id;
  std::string revision;
  std::string participant_id;
  std::vector<RuntimeBindingFragment> fragments;
};

class WeightRuntimeBindingManifest {
 public:
  // Checks ids, the digest format and duplicate fragment ids; sorts
  // fragments by placement_fragment_id.
  static Result<WeightRuntimeBindingManifest> Make(
      WeightRuntimeBindingManifestSpec spec);

  static constexpr std::string_view kResourceKind = "model_weight";

  const std::string& resource_id() const { return s_.resource_id; }
  const std::string& placement_id() const { return s_.placement_id; }
  const std::string& placement_digest() const { return s_.placement_digest; }
  const std::string& instance_id() const { return s_.instance_id; }
  uint64_t generation() const { return s_.generation; }
  const std::string& lease_id() const { return s_.lease_id; }
  const std::string& revision() const { return s_.revision; }
  const std::string& participant_id() const { return s_.participant_id; }
  const std::vector<RuntimeBindingFragment>& fragments() const {
    return s_.fragments;
  }
  const RuntimeBindingFragment* FindFragment(
      std::string_view placement_fragment_id) const;

 private:
  explicit WeightRuntimeBindingManifest(WeightRuntimeBindingManifestSpec s)
      : s_(std::move(s)) {}
  WeightRuntimeBindingManifestSpec s_;
};

// Where a fragment's bytes live. Executors, the store and the bindings
// state which kinds they move; anything else is refused before a byte
// moves (never copied as if it were host memory).
enum class MemoryKind : uint8_t { kHost, kCuda };

std::string_view MemoryKindName(MemoryKind kind);

// The memory kind a runtime fragment's `device` names: "cpu" is host
// memory, "cuda" or "cuda:<ordinal>" CUDA device memory. Any other device
// is a kind this build does not know: InvalidArgument naming it.
Result<MemoryKind> MemoryKindOfDevice(std::string_view device);

// OK if `fragment`'s memory is of a kind in `supported`; otherwise
// FailedPrecondition "<executor> executor cannot move <kind> memory: <side>
// fragment <id> of participant <p> (device "<device>")".
Status RequireMemoryKind(const RuntimeBindingFragment& fragment,
                         const std::vector<MemoryKind>& supported,
                         std::string_view executor, std::string_view side,
                         std::string_view participant_id);

// Canonical contiguous row-major byte strides of `shape` (last dimension
// `itemsize`), or nullopt when a stride does not fit in int64.
std::optional<Dims> CanonicalStrides(const Dims& shape, int64_t itemsize);

// Rules 30-36: the binding attests this placement, names a known
// participant, binds exactly that participant's fragments with matching
// geometry and canonical contiguous strides, and its views and allocations
// do not overlap except as exact declared aliases.
Status ValidateRuntimeBinding(const WeightPlacementManifest& placement,
                              const WeightRuntimeBindingManifest& binding);

// Which participants a set of bindings must cover.
enum class BindingCoverage {
  kEveryOwner,  // exactly the participants that own fragments
  kSubset,      // any subset of them (a partial live set)
};

// Bindings proven valid for one placement, the way a placement is valid by
// construction: made only by Make (or Merge, Replace, of values made so),
// never modified. Carries what it was checked for: the placement's id and
// digest, the bindings, and the coverage of the cross-binding proof
// (kEveryOwner: every participant owning fragments is bound; kSubset: any
// of them). The rules hold for as long as the value lives, since bindings
// are immutable and the placement is named by its digest.
//
// The contract for consumers (Reshard, BoundTransferPlan::Bind, the store's
// uploads and loads, checkpoint loads and writes): take a CheckedBindings,
// call RequireFor with their placement, and never check the bindings
// again. Each binding is thus checked once per operation; functions that
// take plain bindings make a CheckedBindings once and hand it down.
//
// Cheap to copy: copies share one immutable state.
class CheckedBindings {
 public:
  // Checks every binding against `placement` once (rules 30-36), then the
  // set: bindings only for participants that own fragments (rule 50),
  // unique participants and runtime fragment ids (rule 37), the address
  // rules across bindings of one instance (rules 35-36) and the
  // participants `coverage` asks for (rule 38). Errors as
  // ValidateRuntimeBindings.
  static Result<CheckedBindings> Make(
      const WeightPlacementManifest& placement,
      std::vector<WeightRuntimeBindingManifest> bindings,
      BindingCoverage coverage = BindingCoverage::kEveryOwner);

  // Sets checked for `placement` on their own (for example one per
  // participant) as one set. No binding is checked again; only the set
  // rules are (rules 50, 37, 35-36 across the sets, and `coverage`).
  static Result<CheckedBindings> Merge(
      const WeightPlacementManifest& placement,
      const std::vector<CheckedBindings>& sets,
      BindingCoverage coverage = BindingCoverage::kEveryOwner);

  // This set with each binding of `now` in the place of its participant's
  // (appended when the participant had none): a binding equal to the one
  // held is not checked again, a moved one is (rules 30-36); the set rules
  // are checked over the result, with this set's coverage.
  Result<CheckedBindings> Replace(
      const WeightPlacementManifest& placement,
      const std::vector<WeightRuntimeBindingManifest>& now) const;

  // The bindings of the participants in `participant_ids` (those this set
  // has): a subset of a checked set needs no check. Coverage kSubset.
  CheckedBindings Only(const std::vector<std::string>& participant_ids) const;

  // OK when this set was checked for `placement` (id and digest); else
  // InvalidArgument "runtime bindings were checked for placement <a>, not
  // <b>". What a consumer does instead of checking the bindings.
  Status RequireFor(const WeightPlacementManifest& placement) const;

  const std::string& placement_id() const;
  const std::string& placement_digest() const;
  BindingCoverage coverage() const;
  const std::vector<WeightRuntimeBindingManifest>& bindings() const;
  // The binding of `participant_id`, or nullptr.
  const WeightRuntimeBindingManifest* Find(
      std::string_view participant_id) const;

 private:
  struct State;
  explicit CheckedBindings(std::shared_ptr<const State> state)
      : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// CheckedBindings::Make(placement, bindings, coverage).status(): rules
// 37-38 plus every binding, for callers that need no proof to hand on.
Status ValidateRuntimeBindings(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    BindingCoverage coverage = BindingCoverage::kEveryOwner);

// Canonical wire of a binding (sorted keys, compact, ensure_ascii=True).
std::string WeightRuntimeBindingToJson(
    const WeightRuntimeBindingManifest& binding);
// Strict decoder of that wire.
Result<WeightRuntimeBindingManifest> WeightRuntimeBindingFromJson(
    std::string_view json);

}  // namespace reshard

#endif  // RESHARD_BINDING_H_
