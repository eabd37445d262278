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

// The entry's tensor descriptor fields, except parallel_axes.
Status ReadEntryTensor(const internal::WideStrictObject& o,
                       TensorDescriptorSpec* t) {
  RESHARD_ASSIGN_OR_RETURN(t->tensor_id, o.Id("tensor_id"));
  RESHARD_ASSIGN_OR_RETURN(t->dtype, o.Id("dtype"));
  RESHARD_ASSIGN_OR_RETURN(t->layout_fingerprint, o.Id("layout_fingerprint"));
  RESHARD_ASSIGN_OR_RETURN(t->global_shape, o.IntArray("global_shape"));
  RESHARD_ASSIGN_OR_RETURN(t->itemsize, o.I64("itemsize"));
  RESHARD_ASSIGN_OR_RETURN(t->layer_id, o.OptionalI64("layer_id"));
  RESHARD_ASSIGN_OR_RETURN(t->expert_id, o.OptionalI64("expert_id"));
  RESHARD_ASSIGN_OR_RETURN(t->shard_dims, o.IntArray("shard_dims"));
  return Status::OK();
}

// One legacy axis {kind, split_dim}: an integer split_dim is a split; null
// is replicated for dp and tp, ownership for pp, and for ep ownership when
// the tensor has an expert_id (see legacy.h).
Result<ParallelAxis> ReadLegacyAxis(JsonElement e, const JsonPath& path,
                                    bool has_expert_id) {
  RESHARD_ASSIGN_OR_RETURN(auto ao,
                           StrictObject::Make(e, path, "legacy parallel axis",
                                              {"kind", "split_dim"}));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind_name, ao.String("kind"));
  RESHARD_ASSIGN_OR_RETURN(AxisKind kind, ParseAxisKind(kind_name));
  RESHARD_ASSIGN_OR_RETURN(auto split, ao.OptionalI64("split_dim"));
  if (split.has_value()) {
    auto axis = SplitAxis(kind, *split);
    if (!axis.ok()) return axis.status().WithContext(path.ToString());
    return *axis;
  }
  if (kind == AxisKind::kPp || (kind == AxisKind::kEp && has_expert_id)) {
    return OwnershipAxis(kind);
  }
  return ReplicatedAxis(kind);
}

// The entry's parallel_axes, then the legacy one-dimensional TP form:
// partition_dim = d (with empty shard_dims) means shard_dims = [d] and a TP
// split on d.
Status ReadEntryAxes(const internal::WideStrictObject& o,
                     std::optional<int64_t> partition_dim,
                     TensorDescriptorSpec* t) {
  RESHARD_ASSIGN_OR_RETURN(internal::JsonArray axes, o.Array("parallel_axes"));
  bool has_tp = false;
  RESHARD_RETURN_NOT_OK(
      axes.ForEach([&](JsonElement a, const JsonPath& ip) -> Status {
        RESHARD_ASSIGN_OR_RETURN(
            ParallelAxis axis, ReadLegacyAxis(a, ip, t->expert_id.has_value()));
        has_tp |= axis.kind() == AxisKind::kTp;
        t->parallel_axes.push_back(axis);
        return Status::OK();
      }));
  if (t->shard_dims.empty() && partition_dim.has_value()) {
    t->shard_dims = {*partition_dim};
    if (!has_tp) {
      auto axis = SplitAxis(AxisKind::kTp, *partition_dim);
      if (!axis.ok()) return axis.status().WithContext(o.path().ToString());
      t->parallel_axes.push_back(*axis);
    }
  }
  return Status::OK();
}

// The entry's placement fragment; its rank may carry a legacy moe_dp.
Status ReadEntryFragment(const internal::WideStrictObject& o,
                         PlacementFragmentSpec* f) {
  RESHARD_ASSIGN_OR_RETURN(f->global_offset, o.IntArray("global_offset"));
  RESHARD_ASSIGN_OR_RETURN(f->local_shape, o.IntArray("local_shape"));
  RESHARD_ASSIGN_OR_RETURN(f->nbytes, o.U64("nbytes"));
  RESHARD_ASSIGN_OR_RETURN(f->aliases, o.StringArray("aliases"));
  RESHARD_ASSIGN_OR_RETURN(
      auto ro,
      o.Object("rank", "legacy rank", {"dp", "ep", "pp", "tp"}, {"moe_dp"}));
  int64_t* slots[] = {&f->rank.dp, &f->rank.ep, &f->rank.pp, &f->rank.tp};
  const char* names[] = {"dp", "ep", "pp", "tp"};
  for (int k = 0; k < 4; ++k) {
    RESHARD_ASSIGN_OR_RETURN(*slots[k], ro.I64(names[k]));
  }
  return Status::OK();
}

// The entry's runtime view (its placement_fragment_id is set once the
// fragment is made).
Status ReadEntryRuntime(const internal::WideStrictObject& o,
                        RuntimeBindingFragmentSpec* r) {
  RESHARD_ASSIGN_OR_RETURN(r->runtime_fragment_id, o.Id("fragment_id"));
  RESHARD_ASSIGN_OR_RETURN(r->worker_id, o.Id("worker_id"));
  RESHARD_ASSIGN_OR_RETURN(r->endpoint, o.Id("endpoint"));
  RESHARD_ASSIGN_OR_RETURN(r->device, o.Id("device"));
  RESHARD_ASSIGN_OR_RETURN(r->address, o.U64("address"));
  return Status::OK();
}

Status ReadEntryStorage(const internal::WideStrictObject& o,
                        RuntimeBindingFragmentSpec* r) {
  RESHARD_ASSIGN_OR_RETURN(r->strides_bytes, o.IntArray("strides_bytes"));
  RESHARD_ASSIGN_OR_RETURN(r->storage_address, o.U64("storage_address"));
  RESHARD_ASSIGN_OR_RETURN(r->storage_nbytes, o.U64("storage_nbytes"));
  RESHARD_ASSIGN_OR_RETURN(r->storage_offset_bytes,
                           o.U64("storage_offset_bytes"));
  return Status::OK();
}

// One inventory entry: a tensor descriptor, a placement fragment and the
// runtime view of that fragment, read in that order.
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
  if (o.Has("is_contiguous")) {
    RESHARD_ASSIGN_OR_RETURN(bool contiguous, o.Bool("is_contiguous"));
    if (!contiguous) {
      return Status::InvalidArgument(p.ToString() +
                                     ": view is not contiguous (is_contiguous "
                                     "is false)");
    }
  }
  Entry out;
  RESHARD_RETURN_NOT_OK(ReadEntryTensor(o, &out.tensor));
  RESHARD_ASSIGN_OR_RETURN(auto partition_dim, o.OptionalI64("partition_dim"));
  RESHARD_RETURN_NOT_OK(ReadEntryAxes(o, partition_dim, &out.tensor));
  out.fragment.tensor_id = out.tensor.tensor_id;
  RESHARD_RETURN_NOT_OK(ReadEntryFragment(o, &out.fragment));
  RESHARD_RETURN_NOT_OK(ReadEntryRuntime(o, &out.runtime));
  out.runtime.nbytes = out.fragment.nbytes;
  out.runtime.itemsize = out.tensor.itemsize;
  out.runtime.local_shape = out.fragment.local_shape;
  RESHARD_RETURN_NOT_OK(ReadEntryStorage(o, &out.runtime));
  return out;
}

// Every participant of the declared dp x pp x ep x tp grid.
Result<ParallelTopology> GridTopology(const ParallelSizes& sizes) {
  ParallelTopologySpec topo{sizes, {}, std::nullopt};
  for (int64_t dp = 0; dp < sizes.dp; ++dp) {
    for (int64_t pp = 0; pp < sizes.pp; ++pp) {
      for (int64_t ep = 0; ep < sizes.ep; ++ep) {
        for (int64_t tp = 0; tp < sizes.tp; ++tp) {
          ParallelRank r{dp, tp, pp, ep};
          topo.participants.push_back({ParticipantId(r), r});
        }
      }
    }
  }
  return ParallelTopology::Make(std::move(topo));
}

// Reads inventories one by one into one placement's tensors and fragments
// and one binding draft per inventory, then assembles and validates them.
class LegacyImporter {
 public:
  explicit LegacyImporter(const LegacyImportOptions& options)
      : options_(options) {}

  // Inventory `n`; errors are prefixed with "inventory <n>".
  Status AddInventory(size_t n, std::string_view text) {
    const Status st = ReadInventory(n, text);
    return st.ok() ? st : st.WithContext("inventory " + std::to_string(n));
  }

  Result<LegacyImport> Finish(ParallelTopology topology);

 private:
  // A binding before the placement's identities are known.
  struct Pending {
    WeightRuntimeBindingManifestSpec spec;
    std::vector<RuntimeBindingFragmentSpec> views;
  };

  Status ReadInventory(size_t n, std::string_view text);
  // The inventory's header fields; the first fixes the placement header and
  // the others must match its model_id and revision.
  Status ReadInventoryHeader(size_t n, const StrictObject& top, Pending* p);
  Status AddEntry(Entry entry, Pending* p);

  const LegacyImportOptions& options_;
  PlacementHeader header_;
  std::map<std::string, TensorDescriptor> tensors_;
  std::vector<PlacementFragment> fragments_;
  std::vector<Pending> pending_;
};

Status LegacyImporter::ReadInventory(size_t n, std::string_view text) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(text));
  const JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto top, StrictObject::Make(doc.root(), root, "legacy inventory",
                                   {"generation", "instance_id", "lease_id",
                                    "model_id", "revision", "tensors"}));
  Pending p;
  RESHARD_RETURN_NOT_OK(ReadInventoryHeader(n, top, &p));
  RESHARD_ASSIGN_OR_RETURN(internal::JsonArray entries, top.Array("tensors"));
  RESHARD_RETURN_NOT_OK(
      entries.ForEach([&](JsonElement e, const JsonPath& ep) -> Status {
        RESHARD_ASSIGN_OR_RETURN(Entry entry, ReadEntry(e, ep));
        return AddEntry(std::move(entry), &p);
      }));
  pending_.push_back(std::move(p));
  return Status::OK();
}

Status LegacyImporter::ReadInventoryHeader(size_t n, const StrictObject& top,
                                           Pending* p) {
  RESHARD_ASSIGN_OR_RETURN(std::string model_id, top.Id("model_id"));
  RESHARD_ASSIGN_OR_RETURN(p->spec.revision, top.Id("revision"));
  RESHARD_ASSIGN_OR_RETURN(p->spec.instance_id, top.Id("instance_id"));
  RESHARD_ASSIGN_OR_RETURN(p->spec.lease_id, top.Id("lease_id"));
  RESHARD_ASSIGN_OR_RETURN(p->spec.generation, top.U64("generation"));
  if (n == 0) {
    header_ = {model_id, p->spec.revision, p->spec.generation,
               options_.placement_set_id.empty() ? model_id + "-legacy"
                                                 : options_.placement_set_id};
  } else if (model_id != header_.resource_id ||
             p->spec.revision != header_.revision) {
    return Status::InvalidArgument(
        "model_id and revision must match the first inventory");
  }
  return Status::OK();
}

Status LegacyImporter::AddEntry(Entry entry, Pending* p) {
  RESHARD_ASSIGN_OR_RETURN(auto desc, TensorDescriptor::Make(entry.tensor));
  auto [it, inserted] = tensors_.emplace(desc.tensor_id(), desc);
  if (!inserted && !(it->second == desc)) {
    return Status::InvalidArgument(
        "legacy tensor descriptor mismatch: " + desc.tensor_id() + ": " +
        DescribeDescriptorDifference(it->second, desc, "earlier entry",
                                     "this entry"));
  }
  RESHARD_ASSIGN_OR_RETURN(auto frag, PlacementFragment::Make(entry.fragment));
  entry.runtime.placement_fragment_id = frag.placement_fragment_id();
  const std::string participant = ParticipantId(frag.rank());
  if (p->spec.participant_id.empty()) {
    p->spec.participant_id = participant;
  } else if (p->spec.participant_id != participant) {
    return Status::InvalidArgument(
        "one inventory must describe one participant; found ranks of " +
        p->spec.participant_id + " and " + participant);
  }
  p->views.push_back(std::move(entry.runtime));
  fragments_.push_back(std::move(frag));
  return Status::OK();
}

Result<LegacyImport> LegacyImporter::Finish(ParallelTopology topology) {
  std::vector<TensorDescriptor> tensor_list;
  for (auto& [id, t] : tensors_) tensor_list.push_back(t);
  RESHARD_ASSIGN_OR_RETURN(
      auto placement,
      WeightPlacementManifest::FromFragments(
          header_, topology, std::move(tensor_list), std::move(fragments_)));
  std::vector<WeightRuntimeBindingManifest> bindings;
  for (auto& p : pending_) {
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
    bindings.push_back(std::move(b));
  }
  RESHARD_ASSIGN_OR_RETURN(CheckedBindings checked,
                           CheckedBindings::Make(placement, bindings));
  return LegacyImport{placement, std::move(bindings), std::move(checked)};
}

}  // namespace

Result<LegacyImport> ImportLegacyInventories(
    const std::vector<std::string_view>& inventories,
    const LegacyImportOptions& options) {
  if (inventories.empty()) {
    return Status::InvalidArgument("no legacy inventories given");
  }
  RESHARD_ASSIGN_OR_RETURN(auto topology, GridTopology(options.sizes));
  LegacyImporter importer(options);
  for (size_t n = 0; n < inventories.size(); ++n) {
    RESHARD_RETURN_NOT_OK(importer.AddInventory(n, inventories[n]));
  }
  return importer.Finish(std::move(topology));
}

}  // namespace reshard
