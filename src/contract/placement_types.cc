// Factories of the leaf placement types: axes, tensors, fragments, topology.

#include <algorithm>
#include <set>
#include <unordered_set>

#include "contract/placement_codec.h"
#include "reshard/placement.h"
#include "util/dims_text.h"
#include "util/sha256.h"
#include "util/sorted_find.h"

namespace reshard {

using internal::CanonicalJsonWriter;

std::string_view AxisKindName(AxisKind kind) {
  switch (kind) {
    case AxisKind::kDp:
      return "dp";
    case AxisKind::kPp:
      return "pp";
    case AxisKind::kEp:
      return "ep";
    case AxisKind::kTp:
      return "tp";
  }
  return "?";
}

Result<AxisKind> ParseAxisKind(std::string_view name) {
  for (AxisKind k : kAllAxisKinds) {
    if (AxisKindName(k) == name) return k;
  }
  return Status::InvalidArgument("unsupported parallel axis kind: \"" +
                                 std::string(name) + "\"");
}

std::string_view AxisSemanticsName(AxisSemantics semantics) {
  switch (semantics) {
    case AxisSemantics::kSplit:
      return "split";
    case AxisSemantics::kReplicated:
      return "replicated";
    case AxisSemantics::kOwnership:
      return "ownership";
  }
  return "?";
}

bool operator<(const ParallelRank& a, const ParallelRank& b) {
  return std::tie(a.dp, a.pp, a.ep, a.tp) < std::tie(b.dp, b.pp, b.ep, b.tp);
}

std::string ParallelRank::ToString() const {
  return "dp=" + std::to_string(dp) + ",pp=" + std::to_string(pp) +
         ",ep=" + std::to_string(ep) + ",tp=" + std::to_string(tp);
}

Result<ParallelAxis> SplitAxis(AxisKind kind, int64_t dim) {
  if (kind != AxisKind::kEp && kind != AxisKind::kTp) {
    return Status::InvalidArgument(std::string(AxisKindName(kind)) +
                                   " axis cannot use split semantics");
  }
  if (dim < 0) {
    return Status::InvalidArgument("split axis dim must be non-negative");
  }
  if (kind == AxisKind::kEp && dim != 0) {
    return Status::InvalidArgument(
        "EP must split the leading logical expert dimension (dim 0), got "
        "dim " +
        std::to_string(dim));
  }
  return ParallelAxis(AxisSemantics::kSplit, kind, dim);
}

Result<ParallelAxis> GroupedSplitAxis(AxisKind kind, int64_t dim,
                                      int64_t shards) {
  RESHARD_ASSIGN_OR_RETURN(ParallelAxis axis, SplitAxis(kind, dim));
  if (shards < 1) {
    return Status::InvalidArgument(
        "grouped split axis shards must be positive, got " +
        std::to_string(shards));
  }
  axis.shards_ = shards;
  return axis;
}

Result<ParallelAxis> PartialSplitAxis(AxisKind kind, int64_t dim,
                                      int64_t ranks) {
  RESHARD_ASSIGN_OR_RETURN(ParallelAxis axis, SplitAxis(kind, dim));
  if (ranks < 1) {
    return Status::InvalidArgument(
        "partial split axis ranks must be positive, got " +
        std::to_string(ranks));
  }
  axis.ranks_ = ranks;
  return axis;
}

Result<ParallelAxis> SpanningSplitAxis(AxisKind kind, int64_t dim,
                                       AxisKind over) {
  RESHARD_ASSIGN_OR_RETURN(ParallelAxis axis, SplitAxis(kind, dim));
  if (kind != AxisKind::kTp || over != AxisKind::kDp) {
    return Status::InvalidArgument(
        "a spanning split axis splits tp over dp, not " +
        std::string(AxisKindName(kind)) + " over " +
        std::string(AxisKindName(over)));
  }
  axis.over_ = over;
  return axis;
}

ParallelAxis ReplicatedAxis(AxisKind kind) {
  return ParallelAxis(AxisSemantics::kReplicated, kind, -1);
}

ParallelAxis OwnershipAxis(AxisKind kind) {
  return ParallelAxis(AxisSemantics::kOwnership, kind, -1);
}

// ---------------------------------------------------------------- tensors

Result<TensorDescriptor> TensorDescriptor::Make(TensorDescriptorSpec s) {
  if (s.tensor_id.empty()) {
    return Status::InvalidArgument("tensor_id must be a non-empty string");
  }
  auto fail = [&](const std::string& what) {
    return Status::InvalidArgument("tensor " + s.tensor_id + ": " + what);
  };
  if (s.global_shape.empty()) return fail("global_shape must not be empty");
  for (int64_t e : s.global_shape) {
    if (e < 1) return fail("global_shape extents must be >= 1");
  }
  if (s.dtype.empty()) return fail("dtype must be a non-empty string");
  if (s.itemsize < 1) return fail("itemsize must be >= 1");
  if (s.layout_fingerprint.empty()) {
    return fail("layout_fingerprint must be a non-empty string");
  }
  if (s.layer_id.has_value() && *s.layer_id < 0) {
    return fail("layer_id must be >= 0");
  }
  if (s.expert_id.has_value() && *s.expert_id < 0) {
    return fail("expert_id must be >= 0");
  }
  const auto ndim = static_cast<int64_t>(s.global_shape.size());
  for (size_t i = 0; i < s.shard_dims.size(); ++i) {
    if (s.shard_dims[i] < 0 || s.shard_dims[i] >= ndim) {
      return fail("shard_dims contains an out-of-range dimension " +
                  std::to_string(s.shard_dims[i]));
    }
    if (i > 0 && s.shard_dims[i] == s.shard_dims[i - 1]) {
      return fail("shard_dims must not contain duplicates");
    }
    if (i > 0 && s.shard_dims[i] < s.shard_dims[i - 1]) {
      return fail("shard_dims must be sorted");
    }
  }
  std::sort(s.parallel_axes.begin(), s.parallel_axes.end(),
            [](const ParallelAxis& a, const ParallelAxis& b) {
              return a.kind() < b.kind();
            });
  Dims split_dims;
  for (size_t i = 0; i < s.parallel_axes.size(); ++i) {
    const ParallelAxis& axis = s.parallel_axes[i];
    if (i > 0 && axis.kind() == s.parallel_axes[i - 1].kind()) {
      return fail("parallel_axes must not contain duplicate kinds (" +
                  std::string(AxisKindName(axis.kind())) + ")");
    }
    if (axis.semantics() != AxisSemantics::kSplit) continue;
    if (axis.dim() >= ndim) {
      return fail("split axis " + std::string(AxisKindName(axis.kind())) +
                  " uses an out-of-range dimension " +
                  std::to_string(axis.dim()));
    }
    if (std::find(split_dims.begin(), split_dims.end(), axis.dim()) !=
        split_dims.end()) {
      return fail("split axes must not share a dimension");
    }
    split_dims.push_back(axis.dim());
    if (axis.kind() == AxisKind::kEp && s.expert_id.has_value()) {
      return fail(
          "an individually allocated expert requires explicit EP ownership, "
          "not an EP split");
    }
  }
  for (const ParallelAxis& axis : s.parallel_axes) {
    if (!axis.over().has_value()) continue;
    for (const ParallelAxis& other : s.parallel_axes) {
      if (other.kind() != *axis.over()) continue;
      const std::string over(AxisKindName(*axis.over()));
      return fail(std::string(AxisKindName(axis.kind())) + " split over " +
                  over + " consumes the " + over + " axis, which the tensor " +
                  "must not declare too");
    }
  }
  std::sort(split_dims.begin(), split_dims.end());
  if (split_dims != s.shard_dims) {
    return fail("parallel axis split dimensions conflict with shard_dims");
  }
  return TensorDescriptor(std::move(s));
}

const ParallelAxis* TensorDescriptor::FindAxis(AxisKind kind) const {
  for (const auto& axis : s_->parallel_axes) {
    if (axis.kind() == kind) return &axis;
  }
  return nullptr;
}

uint64_t TensorDescriptor::num_elements() const {
  unsigned __int128 n = 1;
  for (int64_t e : s_->global_shape) {
    n *= static_cast<uint64_t>(e);
    if (n > UINT64_MAX) return UINT64_MAX;
  }
  return static_cast<uint64_t>(n);
}

bool operator==(const TensorDescriptor& a, const TensorDescriptor& b) {
  if (a.s_ == b.s_) return true;
  const auto& x = *a.s_;
  const auto& y = *b.s_;
  return x.tensor_id == y.tensor_id && x.global_shape == y.global_shape &&
         x.dtype == y.dtype && x.itemsize == y.itemsize &&
         x.shard_dims == y.shard_dims &&
         x.layout_fingerprint == y.layout_fingerprint &&
         x.parallel_axes == y.parallel_axes && x.layer_id == y.layer_id &&
         x.expert_id == y.expert_id;
}

namespace {

std::string OptionalText(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : std::string("none");
}

std::string AxesText(const std::vector<ParallelAxis>& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::string(AxisSemanticsName(axes[i].semantics())) + " " +
         std::string(AxisKindName(axes[i].kind()));
    if (axes[i].semantics() == AxisSemantics::kSplit) {
      s += " dim " + std::to_string(axes[i].dim());
    }
    if (axes[i].shards() > 0) {
      s += " in " + std::to_string(axes[i].shards()) + " shards";
    }
    if (axes[i].ranks() > 0) {
      s += " over its first " + std::to_string(axes[i].ranks()) + " ranks";
    }
    if (axes[i].over().has_value()) {
      s += " over " + std::string(AxisKindName(*axes[i].over()));
    }
  }
  return s + "]";
}

}  // namespace

std::string DescribeDescriptorDifference(const TensorDescriptor& a,
                                         const TensorDescriptor& b,
                                         std::string_view a_side,
                                         std::string_view b_side) {
  auto differ = [&](std::string_view field, const std::string& x,
                    const std::string& y) {
    return std::string(field) + " " + x + " (" + std::string(a_side) + ") vs " +
           y + " (" + std::string(b_side) + ")";
  };
  if (a.tensor_id() != b.tensor_id()) {
    return differ("tensor_id", a.tensor_id(), b.tensor_id());
  }
  if (a.global_shape() != b.global_shape()) {
    return differ("global_shape", internal::DimsText(a.global_shape()),
                  internal::DimsText(b.global_shape()));
  }
  if (a.dtype() != b.dtype()) return differ("dtype", a.dtype(), b.dtype());
  if (a.itemsize() != b.itemsize()) {
    return differ("itemsize", std::to_string(a.itemsize()),
                  std::to_string(b.itemsize()));
  }
  if (a.layer_id() != b.layer_id()) {
    return differ("layer_id", OptionalText(a.layer_id()),
                  OptionalText(b.layer_id()));
  }
  if (a.expert_id() != b.expert_id()) {
    return differ("expert_id", OptionalText(a.expert_id()),
                  OptionalText(b.expert_id()));
  }
  if (a.layout_fingerprint() != b.layout_fingerprint()) {
    return differ("layout_fingerprint", "\"" + a.layout_fingerprint() + "\"",
                  "\"" + b.layout_fingerprint() + "\"");
  }
  if (a.shard_dims() != b.shard_dims()) {
    return differ("shard_dims", internal::DimsText(a.shard_dims()),
                  internal::DimsText(b.shard_dims()));
  }
  if (a.parallel_axes() != b.parallel_axes()) {
    return differ("parallel_axes", AxesText(a.parallel_axes()),
                  AxesText(b.parallel_axes()));
  }
  return "";
}

// -------------------------------------------------------------- fragments

std::string CanonicalPlacementFragmentId(const PlacementFragmentSpec& s) {
  // The identity uses the normalised (sorted) alias group.
  std::vector<std::string> aliases = s.aliases;
  std::sort(aliases.begin(), aliases.end());
  std::string json;
  json.reserve(256);
  CanonicalJsonWriter w(&json);
  w.BeginObject();
  w.Key("aliases");
  w.BeginArray();
  for (const auto& a : aliases) w.String(a);
  w.EndArray();
  w.Key("global_offset");
  w.IntArray(s.global_offset);
  w.Key("local_shape");
  w.IntArray(s.local_shape);
  w.KeyUInt("nbytes", s.nbytes);
  if (s.pipeline_stage_id.has_value()) {
    w.KeyInt("pipeline_stage_id", *s.pipeline_stage_id);
  }
  w.Key("rank");
  internal::WriteRank(s.rank, &w);
  w.KeyString("schema", "weight-placement-fragment");
  w.KeyString("tensor_id", s.tensor_id);
  w.EndObject();
  return internal::Sha256Id(json);
}

PlacementFragment::PlacementFragment(
    PlacementFragmentSpec s, std::shared_ptr<const std::string> tensor_id)
    : tensor_id_(std::move(tensor_id)),
      id_(std::move(*s.placement_fragment_id)),
      global_offset_(std::move(s.global_offset)),
      local_shape_(std::move(s.local_shape)),
      nbytes_(s.nbytes),
      rank_(s.rank),
      aliases_(s.aliases.empty()
                   ? nullptr
                   : std::make_shared<const std::vector<std::string>>(
                         std::move(s.aliases))),
      pipeline_stage_id_(s.pipeline_stage_id) {}

namespace {
// What aliases() returns for a fragment without an alias group; at
// namespace scope, so a read costs no guard of a function-local static.
const std::vector<std::string> kNoAliases;
}  // namespace

const std::vector<std::string>& PlacementFragment::aliases() const {
  return aliases_ != nullptr ? *aliases_ : kNoAliases;
}

Result<PlacementFragment> PlacementFragment::Make(PlacementFragmentSpec s) {
  auto tensor_id = std::make_shared<const std::string>(std::move(s.tensor_id));
  return Validated(std::move(s), std::move(tensor_id));
}

Result<PlacementFragment> internal::MakeFragmentSharingTensorId(
    PlacementFragmentSpec spec, std::shared_ptr<const std::string> tensor_id) {
  spec.tensor_id.clear();
  return PlacementFragment::Validated(std::move(spec), std::move(tensor_id));
}

Result<PlacementFragment> PlacementFragment::Validated(
    PlacementFragmentSpec s, std::shared_ptr<const std::string> shared_id) {
  const std::string& tensor_id = *shared_id;
  if (tensor_id.empty()) {
    return Status::InvalidArgument(
        "placement fragment tensor_id must be a non-empty string");
  }
  std::sort(s.aliases.begin(), s.aliases.end());
  const bool has_id = s.placement_fragment_id.has_value();
  auto fail = [&](const std::string& what) {
    std::string who =
        has_id ? *s.placement_fragment_id
               : "of tensor " + tensor_id + " at rank " + s.rank.ToString();
    return Status::InvalidArgument("placement fragment " + who + ": " + what);
  };
  if (has_id && s.placement_fragment_id->empty()) {
    return Status::InvalidArgument(
        "placement_fragment_id must be a non-empty string (tensor " +
        tensor_id + ")");
  }
  if (s.rank.dp < 0 || s.rank.tp < 0 || s.rank.pp < 0 || s.rank.ep < 0) {
    return fail("rank coordinates must be >= 0");
  }
  if (s.global_offset.size() != s.local_shape.size() || s.local_shape.empty()) {
    return fail(
        "fragment rank mismatch: global_offset and local_shape "
        "differ in length");
  }
  for (int64_t o : s.global_offset) {
    if (o < 0) return fail("global_offset must be >= 0");
  }
  for (int64_t e : s.local_shape) {
    if (e < 1) return fail("local_shape extents must be >= 1");
  }
  if (s.nbytes < 1) return fail("nbytes must be >= 1");
  if (s.pipeline_stage_id.has_value() && *s.pipeline_stage_id < 0) {
    return fail("pipeline_stage_id must be >= 0");
  }
  if (!s.aliases.empty()) {
    for (size_t i = 0; i < s.aliases.size(); ++i) {
      if (s.aliases[i].empty()) {
        return fail("aliases must be non-empty strings");
      }
      if (i > 0 && s.aliases[i] == s.aliases[i - 1]) {
        return fail("aliases must not contain duplicates");
      }
    }
    if (s.aliases.size() < 2) {
      return fail("alias group must contain at least two tensor IDs");
    }
    if (!std::binary_search(s.aliases.begin(), s.aliases.end(), tensor_id)) {
      return fail("alias group must contain the fragment tensor_id");
    }
  }
  if (!has_id) {
    // The canonical id reads the tensor id from the spec.
    s.tensor_id = tensor_id;
    s.placement_fragment_id = CanonicalPlacementFragmentId(s);
  }
  return PlacementFragment(std::move(s), std::move(shared_id));
}

bool operator==(const PlacementFragment& a, const PlacementFragment& b) {
  return a.id_ == b.id_ && a.tensor_id() == b.tensor_id() &&
         a.global_offset_ == b.global_offset_ &&
         a.local_shape_ == b.local_shape_ && a.nbytes_ == b.nbytes_ &&
         a.rank_ == b.rank_ && a.aliases() == b.aliases() &&
         a.pipeline_stage_id_ == b.pipeline_stage_id_;
}

// --------------------------------------------------------------- topology

namespace {

int64_t SizeOf(const ParallelTopologySpec& s, AxisKind kind) {
  switch (kind) {
    case AxisKind::kDp:
      return s.sizes.dp;
    case AxisKind::kPp:
      return s.sizes.pp;
    case AxisKind::kEp:
      return s.sizes.ep;
    case AxisKind::kTp:
      return s.sizes.tp;
  }
  return 1;
}

// Rule 16 per participant (participants sorted by id): non-empty, unique
// ids, every rank coordinate within its axis size; then unique ranks.
Status CheckParticipants(const ParallelTopologySpec& s) {
  std::vector<ParallelRank> ranks;
  ranks.reserve(s.participants.size());
  for (size_t i = 0; i < s.participants.size(); ++i) {
    const auto& p = s.participants[i];
    if (p.participant_id.empty()) {
      return Status::InvalidArgument(
          "topology participant_id must be a non-empty string");
    }
    if (i > 0 && p.participant_id == s.participants[i - 1].participant_id) {
      return Status::InvalidArgument("duplicate topology participant_id: " +
                                     p.participant_id);
    }
    for (AxisKind k : kAllAxisKinds) {
      const int64_t v = p.rank.Get(k);
      const int64_t size = SizeOf(s, k);
      if (v < 0 || v >= size) {
        return Status::InvalidArgument(
            std::string(AxisKindName(k)) +
            " rank is out of range for participant " + p.participant_id + ": " +
            std::to_string(v) + " not in [0, " + std::to_string(size) + ")");
      }
    }
    ranks.push_back(p.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] == ranks[i - 1]) {
      return Status::InvalidArgument("duplicate topology parallel rank: " +
                                     ranks[i].ToString());
    }
  }
  return Status::OK();
}

// The canonical topology_id: SHA-256 of the identity object (the wire form
// with "schema" instead of "topology_id").
std::string CanonicalTopologyId(const ParallelTopologySpec& s) {
  std::string json;
  CanonicalJsonWriter w(&json);
  w.BeginObject();
  w.KeyInt("dp_size", s.sizes.dp);
  w.KeyInt("ep_size", s.sizes.ep);
  w.Key("participants");
  w.BeginArray();
  for (const auto& p : s.participants) internal::WriteParticipant(p, &w);
  w.EndArray();
  w.KeyInt("pp_size", s.sizes.pp);
  w.KeyString("schema", "weight-parallel-topology");
  w.KeyInt("tp_size", s.sizes.tp);
  w.EndObject();
  return internal::Sha256Id(json);
}

}  // namespace

int64_t ParallelTopology::size(AxisKind kind) const { return SizeOf(s_, kind); }

Result<ParallelTopology> ParallelTopology::Make(ParallelTopologySpec s) {
  const std::pair<const char*, int64_t> sizes[] = {{"tp_size", s.sizes.tp},
                                                   {"pp_size", s.sizes.pp},
                                                   {"ep_size", s.sizes.ep},
                                                   {"dp_size", s.sizes.dp}};
  for (const auto& [name, v] : sizes) {
    if (v < 1) {
      return Status::InvalidArgument(std::string("topology ") + name +
                                     " must be >= 1");
    }
  }
  if (s.participants.empty()) {
    return Status::InvalidArgument("topology participants must not be empty");
  }
  std::sort(s.participants.begin(), s.participants.end(),
            [](const auto& a, const auto& b) {
              return a.participant_id < b.participant_id;
            });
  RESHARD_RETURN_NOT_OK(CheckParticipants(s));
  std::string id = CanonicalTopologyId(s);
  if (s.topology_id.has_value() && *s.topology_id != id) {
    return Status::InvalidArgument(
        "topology_id does not match canonical topology: got " + *s.topology_id +
        ", expected " + id);
  }
  s.topology_id = std::move(id);
  return ParallelTopology(std::move(s));
}

const TopologyParticipant* ParallelTopology::FindParticipant(
    std::string_view id) const {
  return internal::FindSorted(
      s_.participants, id,
      [](const auto& p) -> decltype(auto) { return p.participant_id; });
}

}  // namespace reshard
