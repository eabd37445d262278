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

// Rules 37-38 plus every binding: unique participants, runtime fragment ids
// unique across participants, address rules across bindings sharing an
// instance, and the participants `coverage` asks for.
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
