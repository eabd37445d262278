// The placement codec: canonical writers and strict readers of the wire's
// sub-objects (docs/wire-format.md).

#include "contract/placement_codec.h"

namespace reshard::internal {

// --- Writers ---------------------------------------------------------------

void WriteRank(const ParallelRank& rank, CanonicalJsonWriter* w) {
  w->BeginObject();
  w->KeyInt("dp", rank.dp);
  w->KeyInt("ep", rank.ep);
  w->KeyInt("pp", rank.pp);
  w->KeyInt("tp", rank.tp);
  w->EndObject();
}

void WriteAxis(const ParallelAxis& axis, CanonicalJsonWriter* w) {
  w->BeginObject();
  if (axis.semantics() == AxisSemantics::kSplit) w->KeyInt("dim", axis.dim());
  w->KeyString("kind", AxisKindName(axis.kind()));
  if (axis.over().has_value()) {
    w->KeyString("over", AxisKindName(*axis.over()));
  }
  if (axis.ranks() > 0) w->KeyInt("ranks", axis.ranks());
  w->KeyString("semantics", AxisSemanticsName(axis.semantics()));
  if (axis.shards() > 0) w->KeyInt("shards", axis.shards());
  w->EndObject();
}

namespace {
void WriteOptionalInt(const std::optional<int64_t>& v, CanonicalJsonWriter* w) {
  if (v.has_value()) {
    w->Int(*v);
  } else {
    w->Null();
  }
}
}  // namespace

void WriteTensor(const TensorDescriptor& t, CanonicalJsonWriter* w) {
  w->BeginObject();
  w->KeyString("dtype", t.dtype());
  w->Key("expert_id");
  WriteOptionalInt(t.expert_id(), w);
  w->Key("global_shape");
  w->IntArray(t.global_shape());
  w->KeyInt("itemsize", t.itemsize());
  w->Key("layer_id");
  WriteOptionalInt(t.layer_id(), w);
  w->KeyString("layout_fingerprint", t.layout_fingerprint());
  w->Key("parallel_axes");
  w->BeginArray();
  for (const auto& axis : t.parallel_axes()) WriteAxis(axis, w);
  w->EndArray();
  w->Key("shard_dims");
  w->IntArray(t.shard_dims());
  w->KeyString("tensor_id", t.tensor_id());
  w->EndObject();
}

void WriteFragment(const PlacementFragment& f, CanonicalJsonWriter* w) {
  w->BeginObject();
  w->Key("aliases");
  w->BeginArray();
  for (const auto& a : f.aliases()) w->String(a);
  w->EndArray();
  w->Key("global_offset");
  w->IntArray(f.global_offset());
  w->Key("local_shape");
  w->IntArray(f.local_shape());
  w->KeyUInt("nbytes", f.nbytes());
  if (f.pipeline_stage_id().has_value()) {
    w->KeyInt("pipeline_stage_id", *f.pipeline_stage_id());
  }
  w->KeyString("placement_fragment_id", f.placement_fragment_id());
  w->Key("rank");
  WriteRank(f.rank(), w);
  w->KeyString("tensor_id", f.tensor_id());
  w->EndObject();
}

void WriteParticipant(const TopologyParticipant& p, CanonicalJsonWriter* w) {
  w->BeginObject();
  w->KeyString("participant_id", p.participant_id);
  w->Key("rank");
  WriteRank(p.rank, w);
  w->EndObject();
}

void WriteTopology(const ParallelTopology& t, CanonicalJsonWriter* w) {
  w->BeginObject();
  w->KeyInt("dp_size", t.dp_size());
  w->KeyInt("ep_size", t.ep_size());
  w->Key("participants");
  w->BeginArray();
  for (const auto& p : t.participants()) WriteParticipant(p, w);
  w->EndArray();
  w->KeyInt("pp_size", t.pp_size());
  w->KeyString("topology_id", t.topology_id());
  w->KeyInt("tp_size", t.tp_size());
  w->EndObject();
}

// --- Readers ---------------------------------------------------------------

Result<ParallelRank> ReadRank(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(e, path, "parallel rank", {"dp", "ep", "pp", "tp"}));
  ParallelRank r;
  int64_t* slots[] = {&r.dp, &r.ep, &r.pp, &r.tp};
  const char* names[] = {"dp", "ep", "pp", "tp"};
  for (int i = 0; i < 4; ++i) {
    RESHARD_ASSIGN_OR_RETURN(*slots[i], obj.I64(names[i]));
    if (*slots[i] < 0) {
      return Status::InvalidArgument(obj.FieldPath(names[i]).ToString() +
                                     " must be >= 0");
    }
  }
  return r;
}

// The split axis `obj` describes: plain, grouped ("shards"), partial
// ("ranks") or spanning ("over"), at most one of the three extensions.
Result<ParallelAxis> ReadSplitAxis(const StrictObject& obj, AxisKind kind,
                                   const JsonPath& path) {
  if (!obj.Has("dim")) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: split axis "
        "requires \"dim\"");
  }
  RESHARD_ASSIGN_OR_RETURN(int64_t d, obj.I64("dim"));
  if (obj.Has("shards") && obj.Has("ranks")) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: a split axis "
        "carries \"shards\" or \"ranks\", not both");
  }
  if (obj.Has("over") && (obj.Has("shards") || obj.Has("ranks"))) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: a split axis "
        "carrying \"over\" carries neither \"shards\" nor \"ranks\"");
  }
  int64_t shards = 0, ranks = 0;
  if (obj.Has("shards")) {
    RESHARD_ASSIGN_OR_RETURN(shards, obj.I64("shards"));
  }
  if (obj.Has("ranks")) {
    RESHARD_ASSIGN_OR_RETURN(ranks, obj.I64("ranks"));
  }
  Result<ParallelAxis> axis = Status::Internal("unset");
  if (obj.Has("over")) {
    RESHARD_ASSIGN_OR_RETURN(std::string_view over_name, obj.String("over"));
    auto over = ParseAxisKind(over_name);
    if (!over.ok()) return over.status().WithContext(path.ToString());
    axis = SpanningSplitAxis(kind, d, *over);
  } else {
    axis = obj.Has("shards")  ? GroupedSplitAxis(kind, d, shards)
           : obj.Has("ranks") ? PartialSplitAxis(kind, d, ranks)
                              : SplitAxis(kind, d);
  }
  if (!axis.ok()) return axis.status().WithContext(path.ToString());
  return *axis;
}

Result<ParallelAxis> ReadAxis(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(e, path, "parallel axis", {"kind", "semantics"},
                         {"dim", "shards", "ranks", "over"}));
  RESHARD_ASSIGN_OR_RETURN(std::string_view sem, obj.String("semantics"));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind_name, obj.String("kind"));
  auto kind = ParseAxisKind(kind_name);
  if (!kind.ok()) return kind.status().WithContext(path.ToString());
  if (sem != "split" && sem != "replicated" && sem != "ownership") {
    return Status::InvalidArgument(path.ToString() +
                                   ": unsupported parallel axis semantics \"" +
                                   std::string(sem) + "\"");
  }
  if (sem == "split") return ReadSplitAxis(obj, *kind, path);
  if (obj.Has("dim") || obj.Has("shards") || obj.Has("ranks")) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: only split "
        "axes carry \"dim\", \"shards\" and \"ranks\"");
  }
  if (obj.Has("over")) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: only split "
        "axes carry \"over\"");
  }
  if (sem == "replicated") return ReplicatedAxis(*kind);
  return OwnershipAxis(*kind);
}

Result<TensorDescriptor> ReadTensor(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(
          e, path, "tensor descriptor",
          {"dtype", "expert_id", "global_shape", "itemsize", "layer_id",
           "layout_fingerprint", "parallel_axes", "shard_dims", "tensor_id"}));
  TensorDescriptorSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.tensor_id, obj.Id("tensor_id"));
  RESHARD_ASSIGN_OR_RETURN(s.global_shape, obj.IntArray("global_shape"));
  RESHARD_ASSIGN_OR_RETURN(s.dtype, obj.Id("dtype"));
  RESHARD_ASSIGN_OR_RETURN(s.itemsize, obj.I64("itemsize"));
  RESHARD_ASSIGN_OR_RETURN(s.shard_dims, obj.IntArray("shard_dims"));
  RESHARD_ASSIGN_OR_RETURN(s.layout_fingerprint, obj.Id("layout_fingerprint"));
  RESHARD_ASSIGN_OR_RETURN(JsonArray axes, obj.Array("parallel_axes"));
  RESHARD_RETURN_NOT_OK(
      axes.ForEach([&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto axis, ReadAxis(item, item_path));
        s.parallel_axes.push_back(axis);
        return Status::OK();
      }));
  RESHARD_ASSIGN_OR_RETURN(s.layer_id, obj.OptionalI64("layer_id"));
  RESHARD_ASSIGN_OR_RETURN(s.expert_id, obj.OptionalI64("expert_id"));
  auto t = TensorDescriptor::Make(std::move(s));
  if (!t.ok()) return t.status().WithContext(path.ToString());
  return t;
}

Result<PlacementFragment> ReadFragment(JsonElement e, const JsonPath& path,
                                       const SharedTensorIds& shared_id) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(e, path, "placement fragment",
                         {"aliases", "global_offset", "local_shape", "nbytes",
                          "placement_fragment_id", "rank", "tensor_id"},
                         {"pipeline_stage_id"}));
  PlacementFragmentSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.placement_fragment_id,
                           obj.Id("placement_fragment_id"));
  RESHARD_ASSIGN_OR_RETURN(s.tensor_id, obj.Id("tensor_id"));
  RESHARD_ASSIGN_OR_RETURN(s.global_offset, obj.IntArray("global_offset"));
  RESHARD_ASSIGN_OR_RETURN(s.local_shape, obj.IntArray("local_shape"));
  RESHARD_ASSIGN_OR_RETURN(s.nbytes, obj.U64("nbytes"));
  RESHARD_ASSIGN_OR_RETURN(s.rank, obj.Decode("rank", ReadRank));
  RESHARD_ASSIGN_OR_RETURN(s.aliases, obj.StringArray("aliases"));
  // docs/validation-rules.md: null reads as absent.
  RESHARD_ASSIGN_OR_RETURN(s.pipeline_stage_id,
                           obj.OptionalI64("pipeline_stage_id"));
  std::shared_ptr<const std::string> shared =
      shared_id ? shared_id(s.tensor_id) : nullptr;
  auto f = shared != nullptr
               ? MakeFragmentSharingTensorId(std::move(s), std::move(shared))
               : PlacementFragment::Make(std::move(s));
  if (!f.ok()) return f.status().WithContext(path.ToString());
  return f;
}

namespace {

Result<TopologyParticipant> ReadParticipant(JsonElement e,
                                            const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto obj,
                           StrictObject::Make(e, path, "topology participant",
                                              {"participant_id", "rank"}));
  TopologyParticipant p;
  RESHARD_ASSIGN_OR_RETURN(p.participant_id, obj.Id("participant_id"));
  RESHARD_ASSIGN_OR_RETURN(p.rank, obj.Decode("rank", ReadRank));
  return p;
}

}  // namespace

Result<ParallelTopology> ReadTopology(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, StrictObject::Make(e, path, "topology",
                                   {"dp_size", "ep_size", "participants",
                                    "pp_size", "topology_id", "tp_size"}));
  ParallelTopologySpec s;
  RESHARD_ASSIGN_OR_RETURN(s.sizes.tp, obj.I64("tp_size"));
  RESHARD_ASSIGN_OR_RETURN(s.sizes.pp, obj.I64("pp_size"));
  RESHARD_ASSIGN_OR_RETURN(s.sizes.ep, obj.I64("ep_size"));
  RESHARD_ASSIGN_OR_RETURN(s.sizes.dp, obj.I64("dp_size"));
  RESHARD_ASSIGN_OR_RETURN(s.topology_id, obj.Id("topology_id"));
  RESHARD_ASSIGN_OR_RETURN(JsonArray participants, obj.Array("participants"));
  RESHARD_RETURN_NOT_OK(participants.ForEach(
      [&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto p, ReadParticipant(item, item_path));
        s.participants.push_back(std::move(p));
        return Status::OK();
      }));
  auto topo = ParallelTopology::Make(std::move(s));
  if (!topo.ok()) return topo.status().WithContext(path.ToString());
  return topo;
}

}  // namespace reshard::internal
