// Strict decoder of the canonical placement wire (digest 2.11).

#include <algorithm>
#include <optional>
#include <thread>
#include <unordered_map>

#include "contract/placement_wire_internal.h"
#include "reshard/placement.h"
#include "util/json_reader.h"

namespace reshard {
namespace internal {

Result<ParallelRank> ReadRank(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(e, path, "parallel rank", {"dp", "ep", "pp", "tp"}));
  ParallelRank r;
  int64_t* slots[] = {&r.dp, &r.ep, &r.pp, &r.tp};
  const char* names[] = {"dp", "ep", "pp", "tp"};
  for (int i = 0; i < 4; ++i) {
    JsonPath p = path.Field(names[i]);
    RESHARD_ASSIGN_OR_RETURN(*slots[i], ReadInt(obj.Get(names[i]), p));
    if (*slots[i] < 0) {
      return Status::InvalidArgument(p.ToString() + " must be >= 0");
    }
  }
  return r;
}

Result<ParallelAxis> ReadAxis(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto obj,
                           StrictObject::Make(e, path, "parallel axis",
                                              {"kind", "semantics"}, {"dim"}));
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view sem,
      ReadString(obj.Get("semantics"), path.Field("semantics")));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind_name,
                           ReadString(obj.Get("kind"), path.Field("kind")));
  auto kind = ParseAxisKind(kind_name);
  if (!kind.ok()) return kind.status().WithContext(path.ToString());
  if (sem != "split" && sem != "replicated" && sem != "ownership") {
    return Status::InvalidArgument(path.ToString() +
                                   ": unsupported parallel axis semantics \"" +
                                   std::string(sem) + "\"");
  }
  const auto dim = obj.Find("dim");
  if (sem == "split") {
    if (!dim.has_value()) {
      return Status::InvalidArgument(
          path.ToString() +
          ": parallel axis schema fields do not match contract: split axis "
          "requires \"dim\"");
    }
    RESHARD_ASSIGN_OR_RETURN(int64_t d, ReadInt(*dim, path.Field("dim")));
    auto axis = SplitAxis(*kind, d);
    if (!axis.ok()) return axis.status().WithContext(path.ToString());
    return *axis;
  }
  if (dim.has_value()) {
    return Status::InvalidArgument(
        path.ToString() +
        ": parallel axis schema fields do not match contract: only split "
        "axes carry \"dim\"");
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
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view id,
      ReadNonEmptyString(obj.Get("tensor_id"), path.Field("tensor_id")));
  s.tensor_id = id;
  RESHARD_ASSIGN_OR_RETURN(
      s.global_shape,
      ReadIntArray(obj.Get("global_shape"), path.Field("global_shape")));
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view dtype,
      ReadNonEmptyString(obj.Get("dtype"), path.Field("dtype")));
  s.dtype = dtype;
  RESHARD_ASSIGN_OR_RETURN(
      s.itemsize, ReadInt(obj.Get("itemsize"), path.Field("itemsize")));
  RESHARD_ASSIGN_OR_RETURN(
      s.shard_dims,
      ReadIntArray(obj.Get("shard_dims"), path.Field("shard_dims")));
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view fp,
      ReadNonEmptyString(obj.Get("layout_fingerprint"),
                         path.Field("layout_fingerprint")));
  s.layout_fingerprint = fp;
  JsonPath axes_path = path.Field("parallel_axes");
  RESHARD_ASSIGN_OR_RETURN(auto axes,
                           ReadArray(obj.Get("parallel_axes"), axes_path));
  size_t i = 0;
  for (auto a : axes) {
    RESHARD_ASSIGN_OR_RETURN(auto axis, ReadAxis(a, axes_path.Index(i++)));
    s.parallel_axes.push_back(axis);
  }
  RESHARD_ASSIGN_OR_RETURN(
      s.layer_id, ReadNullableInt(obj.Get("layer_id"), path.Field("layer_id")));
  RESHARD_ASSIGN_OR_RETURN(
      s.expert_id,
      ReadNullableInt(obj.Get("expert_id"), path.Field("expert_id")));
  auto t = TensorDescriptor::Make(std::move(s));
  if (!t.ok()) return t.status().WithContext(path.ToString());
  return t;
}

Result<PlacementFragment> ReadFragment(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(e, path, "placement fragment",
                         {"aliases", "global_offset", "local_shape", "nbytes",
                          "placement_fragment_id", "rank", "tensor_id"},
                         {"pipeline_stage_id"}));
  PlacementFragmentSpec s;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view id,
      ReadNonEmptyString(obj.Get("placement_fragment_id"),
                         path.Field("placement_fragment_id")));
  s.placement_fragment_id = std::string(id);
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view tid,
      ReadNonEmptyString(obj.Get("tensor_id"), path.Field("tensor_id")));
  s.tensor_id = tid;
  RESHARD_ASSIGN_OR_RETURN(
      s.global_offset,
      ReadIntArray(obj.Get("global_offset"), path.Field("global_offset")));
  RESHARD_ASSIGN_OR_RETURN(
      s.local_shape,
      ReadIntArray(obj.Get("local_shape"), path.Field("local_shape")));
  RESHARD_ASSIGN_OR_RETURN(s.nbytes,
                           ReadU64(obj.Get("nbytes"), path.Field("nbytes")));
  RESHARD_ASSIGN_OR_RETURN(s.rank,
                           ReadRank(obj.Get("rank"), path.Field("rank")));
  RESHARD_ASSIGN_OR_RETURN(
      s.aliases, ReadStringArray(obj.Get("aliases"), path.Field("aliases")));
  if (auto stage = obj.Find("pipeline_stage_id")) {
    RESHARD_ASSIGN_OR_RETURN(
        s.pipeline_stage_id,
        ReadNullableInt(*stage, path.Field("pipeline_stage_id")));
  }
  auto f = PlacementFragment::Make(std::move(s));
  if (!f.ok()) return f.status().WithContext(path.ToString());
  return f;
}

Result<ParallelTopology> ReadTopology(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, StrictObject::Make(e, path, "topology",
                                   {"dp_size", "ep_size", "participants",
                                    "pp_size", "topology_id", "tp_size"}));
  ParallelTopologySpec s;
  RESHARD_ASSIGN_OR_RETURN(s.tp_size,
                           ReadInt(obj.Get("tp_size"), path.Field("tp_size")));
  RESHARD_ASSIGN_OR_RETURN(s.pp_size,
                           ReadInt(obj.Get("pp_size"), path.Field("pp_size")));
  RESHARD_ASSIGN_OR_RETURN(s.ep_size,
                           ReadInt(obj.Get("ep_size"), path.Field("ep_size")));
  RESHARD_ASSIGN_OR_RETURN(s.dp_size,
                           ReadInt(obj.Get("dp_size"), path.Field("dp_size")));
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view tid,
      ReadNonEmptyString(obj.Get("topology_id"), path.Field("topology_id")));
  s.topology_id = std::string(tid);
  JsonPath pp = path.Field("participants");
  RESHARD_ASSIGN_OR_RETURN(auto arr, ReadArray(obj.Get("participants"), pp));
  size_t i = 0;
  for (auto item : arr) {
    JsonPath ip = pp.Index(i++);
    RESHARD_ASSIGN_OR_RETURN(
        auto po, StrictObject::Make(item, ip, "topology participant",
                                    {"participant_id", "rank"}));
    TopologyParticipant p;
    RESHARD_ASSIGN_OR_RETURN(std::string_view pid,
                             ReadNonEmptyString(po.Get("participant_id"),
                                                ip.Field("participant_id")));
    p.participant_id = pid;
    RESHARD_ASSIGN_OR_RETURN(p.rank,
                             ReadRank(po.Get("rank"), ip.Field("rank")));
    s.participants.push_back(std::move(p));
  }
  auto topo = ParallelTopology::Make(std::move(s));
  if (!topo.ok()) return topo.status().WithContext(path.ToString());
  return topo;
}

namespace {

// Documents at least this large decode their parts on two threads.
constexpr size_t kParallelDecodeBytes = 4 << 20;

Result<WeightPlacementPart> DecodePart(
    JsonElement item, const JsonPath& ip, const PlacementHeader& header,
    const std::string& topology_id,
    const std::vector<TensorDescriptor>& tensors,
    const std::unordered_map<std::string_view, size_t>& index,
    std::vector<size_t>* part_tensors, std::vector<uint8_t>* referenced) {
  RESHARD_ASSIGN_OR_RETURN(
      auto po, StrictObject::Make(item, ip, "placement part",
                                  {"fragments", "participant_id", "rank"}));
  WeightPlacementPartSpec ps;
  ps.header = header;
  ps.topology_id = topology_id;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view part_id,
      ReadNonEmptyString(po.Get("participant_id"), ip.Field("participant_id")));
  ps.participant_id = part_id;
  RESHARD_ASSIGN_OR_RETURN(ps.rank, ReadRank(po.Get("rank"), ip.Field("rank")));
  JsonPath fp = ip.Field("fragments");
  RESHARD_ASSIGN_OR_RETURN(auto frag_arr, ReadArray(po.Get("fragments"), fp));
  ps.fragments.reserve(frag_arr.size());
  part_tensors->clear();
  size_t k = 0;
  for (auto fe : frag_arr) {
    JsonPath fpk = fp.Index(k++);
    RESHARD_ASSIGN_OR_RETURN(auto f, ReadFragment(fe, fpk));
    auto it = index.find(f.tensor_id());
    if (it == index.end()) {
      return Status::InvalidArgument(
          fpk.ToString() +
          ": placement part references an unknown tensor: " + f.tensor_id());
    }
    part_tensors->push_back(it->second);
    (*referenced)[it->second] = 1;
    ps.fragments.push_back(std::move(f));
  }
  std::sort(part_tensors->begin(), part_tensors->end());
  part_tensors->erase(std::unique(part_tensors->begin(), part_tensors->end()),
                      part_tensors->end());
  for (size_t t : *part_tensors) ps.tensors.push_back(tensors[t]);
  auto part = WeightPlacementPart::Make(std::move(ps));
  if (!part.ok()) return part.status().WithContext(ip.ToString());
  return part;
}

}  // namespace
}  // namespace internal

Result<WeightPlacementManifest> WeightPlacementFromJson(std::string_view json) {
  using namespace internal;  // NOLINT: the reader helpers
  RESHARD_ASSIGN_OR_RETURN(JsonDocument doc, JsonDocument::Parse(json));
  JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(doc.root(), root, "placement manifest",
                         {"parts", "placement_id", "placement_set_id",
                          "resource_id", "resource_kind", "revision", "tensors",
                          "topology", "weight_generation"}));
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view kind,
      ReadString(obj.Get("resource_kind"), root.Field("resource_kind")));
  if (kind != WeightPlacementManifest::kResourceKind) {
    return Status::InvalidArgument(
        "placement manifest resource_kind must be model_weight, got \"" +
        std::string(kind) + "\"");
  }
  PlacementHeader header;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view rid,
      ReadNonEmptyString(obj.Get("resource_id"), root.Field("resource_id")));
  header.resource_id = rid;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view rev,
      ReadNonEmptyString(obj.Get("revision"), root.Field("revision")));
  header.revision = rev;
  RESHARD_ASSIGN_OR_RETURN(
      header.weight_generation,
      ReadU64(obj.Get("weight_generation"), root.Field("weight_generation")));
  RESHARD_ASSIGN_OR_RETURN(std::string_view psid,
                           ReadNonEmptyString(obj.Get("placement_set_id"),
                                              root.Field("placement_set_id")));
  header.placement_set_id = psid;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view pid,
      ReadNonEmptyString(obj.Get("placement_id"), root.Field("placement_id")));
  RESHARD_ASSIGN_OR_RETURN(
      auto topology, ReadTopology(obj.Get("topology"), root.Field("topology")));

  JsonPath tp = root.Field("tensors");
  RESHARD_ASSIGN_OR_RETURN(auto tensor_arr, ReadArray(obj.Get("tensors"), tp));
  std::vector<TensorDescriptor> tensors;
  tensors.reserve(tensor_arr.size());
  size_t i = 0;
  for (auto item : tensor_arr) {
    RESHARD_ASSIGN_OR_RETURN(auto t, ReadTensor(item, tp.Index(i++)));
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.tensor_id() < b.tensor_id();
  });
  for (size_t k = 1; k < tensors.size(); ++k) {
    if (tensors[k].tensor_id() == tensors[k - 1].tensor_id()) {
      return Status::InvalidArgument("tensors: duplicate tensor_id: " +
                                     tensors[k].tensor_id());
    }
  }
  std::unordered_map<std::string_view, size_t> index;
  index.reserve(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    index.emplace(tensors[k].tensor_id(), k);
  }

  JsonPath parts_path = root.Field("parts");
  RESHARD_ASSIGN_OR_RETURN(auto parts_arr,
                           ReadArray(obj.Get("parts"), parts_path));
  WeightPlacementManifestSpec spec{
      header, std::move(topology), {}, std::string(pid)};
  std::vector<JsonElement> items(parts_arr.begin(), parts_arr.end());
  std::vector<std::optional<Result<WeightPlacementPart>>> decoded(items.size());
  // Decodes parts [begin, end) and marks the tensors they reference.
  auto decode = [&](size_t begin, size_t end, std::vector<uint8_t>* seen) {
    std::vector<size_t> part_tensors;
    for (size_t p = begin; p < end; ++p) {
      decoded[p] = DecodePart(items[p], parts_path.Index(p), header,
                              spec.topology.topology_id(), tensors, index,
                              &part_tensors, seen);
      if (!decoded[p]->ok()) return;  // later parts are not needed
    }
  };
  std::vector<uint8_t> referenced(tensors.size(), 0);
  // Parts are independent: large documents decode on two threads.
  if (json.size() >= kParallelDecodeBytes && items.size() >= 2) {
    std::vector<uint8_t> referenced2(tensors.size(), 0);
    const size_t mid = items.size() / 2;
    std::thread worker(decode, mid, items.size(), &referenced2);
    decode(0, mid, &referenced);
    worker.join();
    for (size_t k = 0; k < tensors.size(); ++k) referenced[k] |= referenced2[k];
  } else {
    decode(0, items.size(), &referenced);
  }
  spec.parts.reserve(items.size());
  for (auto& part : decoded) {
    if (!part.has_value()) continue;  // skipped after an earlier error
    if (!part->ok()) return part->status();
    spec.parts.push_back(std::move(*part).ValueOrDie());
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (!referenced[k]) {
      return Status::InvalidArgument(
          "placement JSON contains an unreferenced tensor: " +
          tensors[k].tensor_id());
    }
  }
  return WeightPlacementManifest::Make(std::move(spec));
}

}  // namespace reshard
