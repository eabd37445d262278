// The address-free placement contract: where every weight fragment lives.
//
// Every type here is an immutable value. The only way to obtain one is its
// static factory (`Make`, `FromFragments`), which validates the input against
// the contract and returns a Status naming the offending field, tensor,
// fragment or participant. Identities (`placement_fragment_id`,
// `topology_id`, `placement_id`, `digest`) are SHA-256 over canonical JSON,
// byte-compatible with every other implementation of the specification.

#ifndef RESHARD_PLACEMENT_H_
#define RESHARD_PLACEMENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dims.h"
#include "reshard/status.h"

namespace reshard {

// Parallel axis kinds in their canonical order dp < pp < ep < tp.
enum class AxisKind : uint8_t { kDp = 0, kPp = 1, kEp = 2, kTp = 3 };
inline constexpr AxisKind kAllAxisKinds[] = {AxisKind::kDp, AxisKind::kPp,
                                             AxisKind::kEp, AxisKind::kTp};
std::string_view AxisKindName(AxisKind kind);
// Parses "dp", "pp", "ep" or "tp".
Result<AxisKind> ParseAxisKind(std::string_view name);

// The sizes of the four parallel axes of a grid (every size >= 1).
struct ParallelSizes {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t ep = 1;
  int64_t dp = 1;

  int64_t Get(AxisKind kind) const {
    switch (kind) {
      case AxisKind::kDp:
        return dp;
      case AxisKind::kPp:
        return pp;
      case AxisKind::kEp:
        return ep;
      case AxisKind::kTp:
        return tp;
    }
    return 1;
  }
  friend bool operator==(const ParallelSizes&, const ParallelSizes&) = default;
};

// A routing coordinate. Logical sharding is expressed by fragment boxes.
struct ParallelRank {
  int64_t dp = 0;
  int64_t tp = 0;
  int64_t pp = 0;
  int64_t ep = 0;

  int64_t Get(AxisKind kind) const {
    switch (kind) {
      case AxisKind::kDp:
        return dp;
      case AxisKind::kPp:
        return pp;
      case AxisKind::kEp:
        return ep;
      case AxisKind::kTp:
        return tp;
    }
    return 0;
  }
  friend bool operator==(const ParallelRank&, const ParallelRank&) = default;
  // Ordered by (dp, pp, ep, tp), the planner's deterministic order.
  friend bool operator<(const ParallelRank& a, const ParallelRank& b);
  // "dp=0,pp=1,ep=2,tp=3".
  std::string ToString() const;
};

enum class AxisSemantics : uint8_t { kSplit, kReplicated, kOwnership };
std::string_view AxisSemanticsName(AxisSemantics semantics);

// One entry of TensorDescriptor::parallel_axes.
class ParallelAxis {
 public:
  AxisSemantics semantics() const { return semantics_; }
  AxisKind kind() const { return kind_; }
  // The split dimension; -1 unless semantics() == kSplit.
  int64_t dim() const { return dim_; }
  // A grouped split (GroupedSplitAxis): the number of shards, fewer than
  // the axis has ranks; 0 for every other axis. Rank r of an axis of size
  // n holds shard r / (n / shards), so each shard is held by a contiguous
  // group of n / shards ranks (its replicas).
  int64_t shards() const { return shards_; }
  // A partial split (PartialSplitAxis): the number of leading ranks that
  // hold the split, fewer than the axis has ranks; 0 for every other axis.
  // Ranks [0, ranks) partition the dimension, ranks [ranks, n) hold no
  // fragment of the tensor.
  int64_t ranks() const { return ranks_; }
  // A spanning split (SpanningSplitAxis): the axis kind whose ranks the
  // split also spans (dp for a tp split); nullopt for every other axis. A
  // participant's split coordinate is rank(over) * size(kind) + rank(kind)
  // and the dimension has size(over) * size(kind) parts; the tensor
  // declares no axis of that kind.
  std::optional<AxisKind> over() const { return over_; }

  friend bool operator==(const ParallelAxis&, const ParallelAxis&) = default;

 private:
  friend Result<ParallelAxis> SplitAxis(AxisKind kind, int64_t dim);
  // A split into `shards` (>= 1) shards along `dim`, each held by a
  // contiguous group of ranks: vLLM's KV heads when TP exceeds them (4 KV
  // heads at TP 8 give each pair of ranks one head). The placement requires
  // 1 <= shards < the axis size and shards dividing it. An extension of the
  // specification: the wire carries "shards" only for these axes, so the
  // identities of placements without them are unchanged; other
  // implementations of the specification refuse it.
  Result<ParallelAxis> GroupedSplitAxis(AxisKind kind, int64_t dim,
                                        int64_t shards);
  friend Result<ParallelAxis> GroupedSplitAxis(AxisKind kind, int64_t dim,
                                               int64_t shards);
  friend Result<ParallelAxis> PartialSplitAxis(AxisKind kind, int64_t dim,
                                               int64_t ranks);
  friend Result<ParallelAxis> SpanningSplitAxis(AxisKind kind, int64_t dim,
                                                AxisKind over);
  friend ParallelAxis ReplicatedAxis(AxisKind kind);
  friend ParallelAxis OwnershipAxis(AxisKind kind);
  ParallelAxis(AxisSemantics s, AxisKind k, int64_t d, int64_t shards = 0)
      : semantics_(s), kind_(k), dim_(d), shards_(shards) {}

  AxisSemantics semantics_;
  AxisKind kind_;
  int64_t dim_;
  int64_t shards_;
  int64_t ranks_ = 0;
  std::optional<AxisKind> over_;
};

// Ranks of `kind` jointly partition the tensor along `dim`. Only ep and tp
// may split; EP must split the leading (expert) dimension 0.
Result<ParallelAxis> SplitAxis(AxisKind kind, int64_t dim);
// A split into `shards` (>= 1) shards along `dim`, each held by a
// contiguous group of ranks: vLLM's KV heads when TP exceeds them (4 KV
// heads at TP 8 give each pair of ranks one head). The placement requires
// 1 <= shards < the axis size and shards dividing it. An extension of the
// specification: the wire carries "shards" only for these axes, so the
// identities of placements without them are unchanged; other
// implementations of the specification refuse it.
Result<ParallelAxis> GroupedSplitAxis(AxisKind kind, int64_t dim,
                                      int64_t shards);
// A split along `dim` over the first `ranks` (>= 1) ranks of `kind` only:
// ranks [0, ranks) partition the dimension as a split axis's ranks do, and
// the ranks from `ranks` on hold no fragment of the tensor (vLLM's
// vocabulary padded to a multiple of 64: at TP 8 a vocabulary of 100 rows
// gives ranks 0-6 its rows and rank 7 only padding). The placement
// requires 1 <= ranks < the axis size. An extension of the specification
// like GroupedSplitAxis: the wire carries "ranks" only for these axes, and
// other implementations of the specification refuse it.
Result<ParallelAxis> PartialSplitAxis(AxisKind kind, int64_t dim,
                                      int64_t ranks);
// A split along `dim` over the ranks of `kind` and `over` together: the
// participant at (over rank o, kind rank k) holds part o * size(kind) + k
// of size(over) * size(kind) parts, and the tensor declares no `over`
// axis (the split consumes it: no replicas over it). vLLM's routed experts
// at DP > 1 without EP, whose FusedMoE flattens TP across DP. Only a tp
// split over dp; the placement requires an over axis of size 2 or more.
// An extension of the specification like GroupedSplitAxis: the wire
// carries "over" only for these axes, and other implementations of the
// specification refuse it.
Result<ParallelAxis> SpanningSplitAxis(AxisKind kind, int64_t dim,
                                       AxisKind over);
// Every rank of `kind` holds a complete independent copy.
ParallelAxis ReplicatedAxis(AxisKind kind);
// Only the ranks named by fragments hold the tensor (PP layer ownership,
// individually allocated experts, DP-owned tensors).
ParallelAxis OwnershipAxis(AxisKind kind);

// Plain input of TensorDescriptor::Make.
struct TensorDescriptorSpec {
  std::string tensor_id;
  Dims global_shape;
  std::string dtype;
  int64_t itemsize = 0;
  Dims shard_dims;
  std::string layout_fingerprint;
  std::vector<ParallelAxis> parallel_axes;
  std::optional<int64_t> layer_id;
  std::optional<int64_t> expert_id;
};

class TensorDescriptor {
 public:
  // Validates (rules 3, 5, 6) and normalises parallel_axes to kind order.
  static Result<TensorDescriptor> Make(TensorDescriptorSpec spec);

  const std::string& tensor_id() const { return s_->tensor_id; }
  const Dims& global_shape() const { return s_->global_shape; }
  size_t ndim() const { return s_->global_shape.size(); }
  const std::string& dtype() const { return s_->dtype; }
  int64_t itemsize() const { return s_->itemsize; }
  const Dims& shard_dims() const { return s_->shard_dims; }
  const std::string& layout_fingerprint() const {
    return s_->layout_fingerprint;
  }
  const std::vector<ParallelAxis>& parallel_axes() const {
    return s_->parallel_axes;
  }
  const std::optional<int64_t>& layer_id() const { return s_->layer_id; }
  const std::optional<int64_t>& expert_id() const { return s_->expert_id; }
  // The axis declared for `kind`, or nullptr.
  const ParallelAxis* FindAxis(AxisKind kind) const;
  // Number of elements (product of global_shape), saturating at 2^64-1.
  uint64_t num_elements() const;

  friend bool operator==(const TensorDescriptor& a, const TensorDescriptor& b);

 private:
  explicit TensorDescriptor(TensorDescriptorSpec s)
      : s_(std::make_shared<const TensorDescriptorSpec>(std::move(s))) {}
  // Shared: parts and manifests hold copies of the same descriptor.
  std::shared_ptr<const TensorDescriptorSpec> s_;
};

// The first field in which two descriptors of one tensor differ, with both
// values labelled by `a_side` and `b_side`, e.g. "dtype bfloat16 (source)
// vs float16 (target)"; empty when they are equal. Fields are compared in
// the order tensor_id, global_shape, dtype, itemsize, layer_id, expert_id,
// layout_fingerprint, shard_dims, parallel_axes.
std::string DescribeDescriptorDifference(const TensorDescriptor& a,
                                         const TensorDescriptor& b,
                                         std::string_view a_side,
                                         std::string_view b_side);

// Plain input of PlacementFragment::Make.
struct PlacementFragmentSpec {
  std::string tensor_id;
  Dims global_offset;
  Dims local_shape;
  uint64_t nbytes = 0;
  ParallelRank rank;
  std::vector<std::string> aliases;
  // Defaults to the canonical id when absent.
  std::optional<std::string> placement_fragment_id;
  std::optional<int64_t> pipeline_stage_id;
};

class PlacementFragment;

namespace internal {
class PlacementDecoder;
class Sha256;
// PlacementFragment::Make for decoders and generators that make many
// fragments of few tensors: the fragment shares `tensor_id` (non-null)
// instead of holding a copy; spec.tensor_id is ignored.
Result<PlacementFragment> MakeFragmentSharingTensorId(
    PlacementFragmentSpec spec, std::shared_ptr<const std::string> tensor_id);
}  // namespace internal

class WeightPlacementManifest;

namespace internal {
// For each of m.fragments() (id order), its position among the fragments
// of m.parts() counted part by part, the order tables built from the parts
// are in: their id order without comparing an id again.
const std::vector<uint32_t>& FragmentPartPositions(
    const WeightPlacementManifest& m);
}  // namespace internal

// An address-free N-D box of one tensor held by one parallel rank.
//
// A placement of a trillion-parameter model holds a million of these: the
// fields are kept compactly (the tensor id shared with the tensor's other
// fragments where the maker allows, the aliases out of line).
class PlacementFragment {
 public:
  // Validates the fragment on its own (rules 3, 10): offsets >= 0, extents
  // >= 1, nbytes >= 1, alias group shape. Geometry against the tensor is
  // checked when the fragment joins a part.
  static Result<PlacementFragment> Make(PlacementFragmentSpec spec);

  const std::string& placement_fragment_id() const { return id_; }
  const std::string& tensor_id() const { return *tensor_id_; }
  const Dims& global_offset() const { return global_offset_; }
  const Dims& local_shape() const { return local_shape_; }
  uint64_t nbytes() const { return nbytes_; }
  const ParallelRank& rank() const { return rank_; }
  const std::vector<std::string>& aliases() const;
  const std::optional<int64_t>& pipeline_stage_id() const {
    return pipeline_stage_id_;
  }

  friend bool operator==(const PlacementFragment& a,
                         const PlacementFragment& b);

 private:
  friend Result<PlacementFragment> internal::MakeFragmentSharingTensorId(
      PlacementFragmentSpec spec, std::shared_ptr<const std::string> tensor_id);
  PlacementFragment(PlacementFragmentSpec s,
                    std::shared_ptr<const std::string> tensor_id);
  static Result<PlacementFragment> Validated(
      PlacementFragmentSpec s, std::shared_ptr<const std::string> tensor_id);

  std::shared_ptr<const std::string> tensor_id_;  // never null
  std::string id_;
  Dims global_offset_;
  Dims local_shape_;
  uint64_t nbytes_ = 0;
  ParallelRank rank_;
  // Null when the fragment has no alias group (almost always).
  std::shared_ptr<const std::vector<std::string>> aliases_;
  std::optional<int64_t> pipeline_stage_id_;
};

// The canonical placement_fragment_id of a fragment's logical content.
std::string CanonicalPlacementFragmentId(const PlacementFragmentSpec& spec);

struct TopologyParticipant {
  std::string participant_id;
  ParallelRank rank;
  friend bool operator==(const TopologyParticipant&,
                         const TopologyParticipant&) = default;
};

struct ParallelTopologySpec {
  ParallelSizes sizes;
  std::vector<TopologyParticipant> participants;
  // When supplied it must equal the canonical id.
  std::optional<std::string> topology_id;
};

class ParallelTopology {
 public:
  // Validates rule 16, sorts participants by id, computes topology_id.
  static Result<ParallelTopology> Make(ParallelTopologySpec spec);

  const ParallelSizes& sizes() const { return s_.sizes; }
  int64_t tp_size() const { return s_.sizes.tp; }
  int64_t pp_size() const { return s_.sizes.pp; }
  int64_t ep_size() const { return s_.sizes.ep; }
  int64_t dp_size() const { return s_.sizes.dp; }
  int64_t size(AxisKind kind) const;
  const std::vector<TopologyParticipant>& participants() const {
    return s_.participants;
  }
  // Number of participants (not the product of the sizes).
  size_t world_size() const { return s_.participants.size(); }
  const std::string& topology_id() const { return *s_.topology_id; }
  // The participant with this id, or nullptr.
  const TopologyParticipant* FindParticipant(std::string_view id) const;

  friend bool operator==(const ParallelTopology& a, const ParallelTopology& b) {
    return a.s_.topology_id == b.s_.topology_id;
  }

 private:
  explicit ParallelTopology(ParallelTopologySpec s) : s_(std::move(s)) {}
  ParallelTopologySpec s_;
};

// The fields shared by every part of one placement.
struct PlacementHeader {
  std::string resource_id;
  std::string revision;
  uint64_t weight_generation = 0;
  std::string placement_set_id;
};

struct WeightPlacementPartSpec {
  PlacementHeader header;
  std::string topology_id;
  std::string participant_id;
  ParallelRank rank;
  std::vector<TensorDescriptor> tensors;
  std::vector<PlacementFragment> fragments;
};

// One participant's address-free contribution. A part may be empty.
class WeightPlacementPart {
 public:
  // Validates rules 7-14 for the part's own fragments and sorts tensors by
  // tensor_id and fragments by placement_fragment_id.
  static Result<WeightPlacementPart> Make(WeightPlacementPartSpec spec);
  // The same for a decoder that already knows each fragment's tensor:
  // tensor_of[i] is the index in spec.tensors of spec.fragments[i]'s
  // tensor. The hint is checked (ids compared), never trusted; it is used
  // when both lists arrive sorted and otherwise ignored.
  static Result<WeightPlacementPart> Make(WeightPlacementPartSpec spec,
                                          std::vector<uint32_t> tensor_of);

  const PlacementHeader& header() const { return s_.header; }
  const std::string& topology_id() const { return s_.topology_id; }
  const std::string& participant_id() const { return s_.participant_id; }
  const ParallelRank& rank() const { return s_.rank; }
  const std::vector<TensorDescriptor>& tensors() const { return s_.tensors; }
  const std::vector<PlacementFragment>& fragments() const {
    return s_.fragments;
  }
  // The index in tensors() of fragments()[i]'s tensor.
  size_t fragment_tensor(size_t i) const { return tensor_of_[i]; }

 private:
  WeightPlacementPart(WeightPlacementPartSpec s,
                      std::vector<uint32_t> tensor_of)
      : s_(std::move(s)), tensor_of_(std::move(tensor_of)) {}
  WeightPlacementPartSpec s_;
  std::vector<uint32_t> tensor_of_;
};

struct WeightPlacementManifestSpec {
  PlacementHeader header;
  ParallelTopology topology;
  std::vector<WeightPlacementPart> parts;
  // When supplied it must equal the canonical id.
  std::optional<std::string> placement_id;
};

// One complete, validated global placement of a weight generation.
// Copies are cheap (shared immutable state).
class WeightPlacementManifest {
 public:
  // Assembles parts (rules 16-27) and computes the identities.
  static Result<WeightPlacementManifest> Make(WeightPlacementManifestSpec spec);
  // Groups a flat fragment inventory into parts by rank -> participant
  // (rule 28). Participants without fragments get empty parts.
  static Result<WeightPlacementManifest> FromFragments(
      PlacementHeader header, ParallelTopology topology,
      std::vector<TensorDescriptor> tensors,
      std::vector<PlacementFragment> fragments);

  static constexpr std::string_view kResourceKind = "model_weight";

  const PlacementHeader& header() const;
  const std::string& resource_id() const { return header().resource_id; }
  const std::string& revision() const { return header().revision; }
  uint64_t weight_generation() const { return header().weight_generation; }
  const std::string& placement_set_id() const {
    return header().placement_set_id;
  }
  const ParallelTopology& topology() const;
  // Sorted by participant_id; one per topology participant.
  const std::vector<WeightPlacementPart>& parts() const;
  // Union of the parts' tensors, sorted by tensor_id.
  const std::vector<TensorDescriptor>& tensors() const;
  // Union of the parts' fragments, sorted by placement_fragment_id.
  const std::vector<const PlacementFragment*>& fragments() const;
  const TensorDescriptor* FindTensor(std::string_view tensor_id) const;
  const WeightPlacementPart* FindPart(std::string_view participant_id) const;
  const PlacementFragment* FindFragment(
      std::string_view placement_fragment_id) const;

  // "sha256:" + hex of the canonical identity object.
  const std::string& placement_id() const;
  // Hex SHA-256 of the canonical wire (ToJson()).
  const std::string& digest() const;

  friend bool operator==(const WeightPlacementManifest& a,
                         const WeightPlacementManifest& b) {
    return a.digest() == b.digest();
  }

 private:
  struct Impl;
  friend std::string WeightPlacementToJson(const WeightPlacementManifest&);
  friend Result<WeightPlacementManifest> WeightPlacementFromJson(
      std::string_view json);
  friend class internal::PlacementDecoder;
  friend const std::vector<uint32_t>& internal::FragmentPartPositions(
      const WeightPlacementManifest& m);
  // Make, given the canonical wire's prefix {"parts":[...] as read (the
  // decoder proved it is the canonical form of spec.parts): the identities
  // hash those bytes instead of serializing the parts again, or start from
  // `prefix_hash`, a hasher that has seen them. Neither: Make.
  static Result<WeightPlacementManifest> Assemble(
      WeightPlacementManifestSpec spec, std::string_view canonical_prefix,
      const internal::Sha256* prefix_hash = nullptr);
  explicit WeightPlacementManifest(std::shared_ptr<const Impl> impl)
      : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// `placement` at another revision and weight generation of its resource:
// every part's header changed alike, topology, tensors and fragments as
// they are (so the placement id and digest change). The target of a load
// of another stored revision, without building the layout again.
Result<WeightPlacementManifest> WithRevision(
    const WeightPlacementManifest& placement, std::string revision,
    uint64_t weight_generation);

// Calls visit(name, value) for each field of `m`'s summary, names sorted:
// what `reshard validate --json` reports of a valid placement (with
// "bindings" and "valid") and Python's placement.summary() returns.
template <typename Visit>
void VisitFields(const WeightPlacementManifest& m, Visit&& visit) {
  visit("digest", m.digest());
  visit("fragments", static_cast<uint64_t>(m.fragments().size()));
  visit("participants",
        static_cast<uint64_t>(m.topology().participants().size()));
  visit("placement_id", m.placement_id());
  visit("resource_id", m.resource_id());
  visit("revision", m.revision());
  visit("tensors", static_cast<uint64_t>(m.tensors().size()));
  visit("topology_id", m.topology().topology_id());
  visit("weight_generation", m.weight_generation());
}

// Canonical wire form (sorted keys, compact, ensure_ascii=True).
std::string WeightPlacementToJson(const WeightPlacementManifest& placement);
// Strict decoder: exact field sets, no duplicate keys, integers only, then
// every rule of the typed factories, then identity checks.
Result<WeightPlacementManifest> WeightPlacementFromJson(std::string_view json);

// The JSON record of one part, what a framework publishes for the others to
// assemble (Python's reshard.torch.part_to_json and gather_placement):
// {"record":"weight-placement-part"} with the part's header, topology_id,
// participant_id and rank, and its tensors and fragments in the placement
// wire's forms (docs/wire-format.md). Canonical: sorted keys, compact,
// ensure_ascii=True, tensors and fragments in the part's order.
inline constexpr std::string_view kPlacementPartRecord =
    "weight-placement-part";
std::string WeightPlacementPartToJson(const WeightPlacementPart& part);
// Strict reader of that record: exact field sets ("part lacks field(s)
// rank", "part has unknown field(s) extra"), no duplicate keys, integers
// only, every rule of the part's factories, errors naming the field's path
// ("part.tensors[0].itemsize must be an integer"); text that is not the
// canonical form of the part it describes is refused ("part is not in
// canonical form ...").
Result<WeightPlacementPart> WeightPlacementPartFromJson(std::string_view json);

}  // namespace reshard

#endif  // RESHARD_PLACEMENT_H_
