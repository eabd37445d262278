#include "contract/placement_json.h"

namespace reshard::internal {

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
  w->KeyString("semantics", AxisSemanticsName(axis.semantics()));
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

}  // namespace reshard::internal
