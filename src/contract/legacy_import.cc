// ImportLegacyInventories: flat runtime inventories -> typed manifests.

#include <map>

#include "reshard/legacy.h"
#include "util/json_reader.h"

namespace reshard {
namespace {

using internal::JsonElement;
using internal::JsonPath;
using internal::StrictObject;

std::string ParticipantId(const ParallelRank& r) {
  return "p-d" + std::to_string(r.dp) + "-p" + std::to_string(r.pp) + "-e" +
         std::to_string(r.ep) + "-t" + std::to_string(r.tp);
}

struct Entry {
  TensorDescriptorSpec tensor;
  PlacementFragmentSpec fragment;
  RuntimeBindingFragmentSpec runtime;
};

Result<Entry> ReadEntry(JsonElement e, const JsonPath& p) {
  RESHARD_ASSIGN_OR_RETURN(
      auto o,
      internal::WideStrictObject::Make(
          e, p, "legacy inventory entry",
          {"address",         "aliases",        "device",
           "dtype",           "endpoint",       "expert_id",
           "fragment_id",     "global_offset",  "global_shape",
           "itemsize",        "layer_id",       "layout_fingerprint",
           "local_shape",     "nbytes",         "parallel_axes",
           "partition_dim",   "rank",           "shard_dims",
           "storage_address", "storage_nbytes", "storage_offset_bytes",
           "strides_bytes",   "tensor_id",      "worker_id"},
          {"byte_offset", "expert_axis", "is_contiguous", "lease_generation",
           "runtime_name", "storage_offset", "stride"}));
  if (auto c = o.Find("is_contiguous")) {
    RESHARD_ASSIGN_OR_RETURN(bool contiguous,
                             internal::ReadBool(*c, p.Field("is_contiguous")));
    if (!contiguous) {
      return Status::InvalidArgument(p.ToString() +
                                     ": view is not contiguous (is_contiguous "
                                     "is false)");
    }
  }
  Entry out;
  TensorDescriptorSpec& t = out.tensor;
  RESHARD_ASSIGN_OR_RETURN(t.tensor_id,
                           internal::ReadIdField(o, "tensor_id", p));
  RESHARD_ASSIGN_OR_RETURN(t.dtype, internal::ReadIdField(o, "dtype", p));
  RESHARD_ASSIGN_OR_RETURN(t.layout_fingerprint,
                           internal::ReadIdField(o, "layout_fingerprint", p));
  RESHARD_ASSIGN_OR_RETURN(
      t.global_shape,
      internal::ReadIntArray(o.Get("global_shape"), p.Field("global_shape")));
  RESHARD_ASSIGN_OR_RETURN(
      t.itemsize, internal::ReadInt(o.Get("itemsize"), p.Field("itemsize")));
  RESHARD_ASSIGN_OR_RETURN(
      t.layer_id,
      internal::ReadNullableInt(o.Get("layer_id"), p.Field("layer_id")));
  RESHARD_ASSIGN_OR_RETURN(
      t.expert_id,
      internal::ReadNullableInt(o.Get("expert_id"), p.Field("expert_id")));
  RESHARD_ASSIGN_OR_RETURN(
      t.shard_dims,
      internal::ReadIntArray(o.Get("shard_dims"), p.Field("shard_dims")));
  RESHARD_ASSIGN_OR_RETURN(auto partition_dim,
                           internal::ReadNullableInt(o.Get("partition_dim"),
                                                     p.Field("partition_dim")));
  // Axes.
  JsonPath ap = p.Field("parallel_axes");
  RESHARD_ASSIGN_OR_RETURN(auto axes,
                           internal::ReadArray(o.Get("parallel_axes"), ap));
  bool has_tp = false;
  size_t i = 0;
  for (auto a : axes) {
    JsonPath ip = ap.Index(i++);
    RESHARD_ASSIGN_OR_RETURN(auto ao,
                             StrictObject::Make(a, ip, "legacy parallel axis",
                                                {"kind", "split_dim"}));
    RESHARD_ASSIGN_OR_RETURN(
        std::string_view kind_name,
        internal::ReadString(ao.Get("kind"), ip.Field("kind")));
    RESHARD_ASSIGN_OR_RETURN(AxisKind kind, ParseAxisKind(kind_name));
    RESHARD_ASSIGN_OR_RETURN(
        auto split,
        internal::ReadNullableInt(ao.Get("split_dim"), ip.Field("split_dim")));
    has_tp |= kind == AxisKind::kTp;
    if (split.has_value()) {
      auto axis = SplitAxis(kind, *split);
      if (!axis.ok()) return axis.status().WithContext(ip.ToString());
      t.parallel_axes.push_back(*axis);
    } else if (kind == AxisKind::kPp ||
               (kind == AxisKind::kEp && t.expert_id.has_value())) {
      t.parallel_axes.push_back(OwnershipAxis(kind));
    } else {
      t.parallel_axes.push_back(ReplicatedAxis(kind));
    }
  }
  // Legacy one-dimensional TP: partition_dim = d means shard_dims = [d].
  if (t.shard_dims.empty() && partition_dim.has_value()) {
    t.shard_dims = {*partition_dim};
    if (!has_tp) {
      auto axis = SplitAxis(AxisKind::kTp, *partition_dim);
      if (!axis.ok()) return axis.status().WithContext(p.ToString());
      t.parallel_axes.push_back(*axis);
    }
  }
  // Fragment.
  PlacementFragmentSpec& f = out.fragment;
  f.tensor_id = t.tensor_id;
  RESHARD_ASSIGN_OR_RETURN(
      f.global_offset,
      internal::ReadIntArray(o.Get("global_offset"), p.Field("global_offset")));
  RESHARD_ASSIGN_OR_RETURN(
      f.local_shape,
      internal::ReadIntArray(o.Get("local_shape"), p.Field("local_shape")));
  RESHARD_ASSIGN_OR_RETURN(
      f.nbytes, internal::ReadU64(o.Get("nbytes"), p.Field("nbytes")));
  RESHARD_ASSIGN_OR_RETURN(
      f.aliases,
      internal::ReadStringArray(o.Get("aliases"), p.Field("aliases")));
  JsonPath rp = p.Field("rank");
  RESHARD_ASSIGN_OR_RETURN(
      auto ro, StrictObject::Make(o.Get("rank"), rp, "legacy rank",
                                  {"dp", "ep", "pp", "tp"}, {"moe_dp"}));
  int64_t* slots[] = {&f.rank.dp, &f.rank.ep, &f.rank.pp, &f.rank.tp};
  const char* names[] = {"dp", "ep", "pp", "tp"};
  for (int k = 0; k < 4; ++k) {
    RESHARD_ASSIGN_OR_RETURN(
        *slots[k], internal::ReadInt(ro.Get(names[k]), rp.Field(names[k])));
  }
  // Runtime view.
  RuntimeBindingFragmentSpec& r = out.runtime;
  RESHARD_ASSIGN_OR_RETURN(r.fragment_id,
                           internal::ReadIdField(o, "fragment_id", p));
  RESHARD_ASSIGN_OR_RETURN(r.worker_id,
                           internal::ReadIdField(o, "worker_id", p));
  RESHARD_ASSIGN_OR_RETURN(r.endpoint, internal::ReadIdField(o, "endpoint", p));
  RESHARD_ASSIGN_OR_RETURN(r.device, internal::ReadIdField(o, "device", p));
  RESHARD_ASSIGN_OR_RETURN(
      r.address, internal::ReadU64(o.Get("address"), p.Field("address")));
  r.nbytes = f.nbytes;
  r.itemsize = t.itemsize;
  r.local_shape = f.local_shape;
  RESHARD_ASSIGN_OR_RETURN(
      r.strides_bytes,
      internal::ReadIntArray(o.Get("strides_bytes"), p.Field("strides_bytes")));
  RESHARD_ASSIGN_OR_RETURN(
      r.storage_address,
      internal::ReadU64(o.Get("storage_address"), p.Field("storage_address")));
  RESHARD_ASSIGN_OR_RETURN(
      r.storage_nbytes,
      internal::ReadU64(o.Get("storage_nbytes"), p.Field("storage_nbytes")));
  RESHARD_ASSIGN_OR_RETURN(r.storage_offset_bytes,
                           internal::ReadU64(o.Get("storage_offset_bytes"),
                                             p.Field("storage_offset_bytes")));
  return out;
}

}  // namespace

Result<LegacyImport> ImportLegacyInventories(
    const std::vector<std::string_view>& inventories,
    const LegacyImportOptions& options) {
  if (inventories.empty()) {
    return Status::InvalidArgument("no legacy inventories given");
  }
  ParallelTopologySpec topo{options.tp, options.pp, options.ep,
                            options.dp, {},         std::nullopt};
  for (int64_t dp = 0; dp < options.dp; ++dp) {
    for (int64_t pp = 0; pp < options.pp; ++pp) {
      for (int64_t ep = 0; ep < options.ep; ++ep) {
        for (int64_t tp = 0; tp < options.tp; ++tp) {
          ParallelRank r{dp, tp, pp, ep};
          topo.participants.push_back({ParticipantId(r), r});
        }
      }
    }
  }
  RESHARD_ASSIGN_OR_RETURN(auto topology,
                           ParallelTopology::Make(std::move(topo)));
  PlacementHeader header;
  std::map<std::string, TensorDescriptor> tensors;
  std::vector<PlacementFragment> fragments;
  struct Pending {
    WeightRuntimeBindingManifestSpec spec;
    std::vector<RuntimeBindingFragmentSpec> views;
  };
  std::vector<Pending> pending;
  for (size_t n = 0; n < inventories.size(); ++n) {
    const std::string where = "inventory " + std::to_string(n);
    auto fail = [&](const Status& st) { return st.WithContext(where); };
    auto doc = internal::JsonDocument::Parse(inventories[n]);
    if (!doc.ok()) return fail(doc.status());
    JsonPath root;
    auto top = StrictObject::Make(doc->root(), root, "legacy inventory",
                                  {"generation", "instance_id", "lease_id",
                                   "model_id", "revision", "tensors"});
    if (!top.ok()) return fail(top.status());
    Pending p;
    auto str = [&](std::string_view k, std::string* dst) -> Status {
      auto v = internal::ReadIdField(*top, k, root);
      if (v.ok()) *dst = std::move(v).ValueOrDie();
      return v.status();
    };
    std::string model_id;
    Status st = str("model_id", &model_id);
    if (st.ok()) st = str("revision", &p.spec.revision);
    if (st.ok()) st = str("instance_id", &p.spec.instance_id);
    if (st.ok()) st = str("lease_id", &p.spec.lease_id);
    if (!st.ok()) return fail(st);
    auto gen =
        internal::ReadU64(top->Get("generation"), root.Field("generation"));
    if (!gen.ok()) return fail(gen.status());
    p.spec.generation = *gen;
    if (n == 0) {
      header = {model_id, p.spec.revision, *gen,
                options.placement_set_id.empty() ? model_id + "-legacy"
                                                 : options.placement_set_id};
    } else if (model_id != header.resource_id ||
               p.spec.revision != header.revision) {
      return Status::InvalidArgument(
          where + ": model_id and revision must match the first inventory");
    }
    JsonPath tp = root.Field("tensors");
    auto arr = internal::ReadArray(top->Get("tensors"), tp);
    if (!arr.ok()) return fail(arr.status());
    size_t i = 0;
    for (auto e : *arr) {
      auto entry = ReadEntry(e, tp.Index(i++));
      if (!entry.ok()) return fail(entry.status());
      auto desc = TensorDescriptor::Make(entry->tensor);
      if (!desc.ok()) return fail(desc.status());
      auto [it, inserted] = tensors.emplace(desc->tensor_id(), *desc);
      if (!inserted && !(it->second == *desc)) {
        return fail(Status::InvalidArgument(
            "legacy tensor descriptor mismatch: " + desc->tensor_id()));
      }
      auto frag = PlacementFragment::Make(entry->fragment);
      if (!frag.ok()) return fail(frag.status());
      entry->runtime.placement_fragment_id = frag->placement_fragment_id();
      if (p.spec.participant_id.empty()) {
        p.spec.participant_id = ParticipantId(frag->rank());
      } else if (p.spec.participant_id != ParticipantId(frag->rank())) {
        return fail(Status::InvalidArgument(
            "one inventory must describe one participant; found ranks of " +
            p.spec.participant_id + " and " + ParticipantId(frag->rank())));
      }
      p.views.push_back(std::move(entry->runtime));
      fragments.push_back(std::move(frag).ValueOrDie());
    }
    pending.push_back(std::move(p));
  }
  std::vector<TensorDescriptor> tensor_list;
  for (auto& [id, t] : tensors) tensor_list.push_back(t);
  RESHARD_ASSIGN_OR_RETURN(
      auto placement,
      WeightPlacementManifest::FromFragments(
          header, topology, std::move(tensor_list), std::move(fragments)));
  LegacyImport out{placement, {}};
  for (auto& p : pending) {
    p.spec.resource_id = placement.resource_id();
    p.spec.placement_id = placement.placement_id();
    p.spec.placement_digest = placement.digest();
    for (auto& v : p.views) {
      RESHARD_ASSIGN_OR_RETURN(auto f,
                               RuntimeBindingFragment::Make(std::move(v)));
      p.spec.fragments.push_back(std::move(f));
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto b, WeightRuntimeBindingManifest::Make(std::move(p.spec)));
    out.bindings.push_back(std::move(b));
  }
  RESHARD_RETURN_NOT_OK(ValidateRuntimeBindings(out.placement, out.bindings));
  return out;
}

}  // namespace reshard
