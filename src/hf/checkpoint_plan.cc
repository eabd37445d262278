// PlanCheckpointWrite: which file and offset every tensor of a placement
// gets, the files' headers and index, and who writes which bytes.

#include <algorithm>
#include <cstdio>
#include <map>

#include "hf/write_plan_state.h"
#include "util/canonical_json.h"
#include "util/printable.h"

namespace reshard {
namespace internal {

bool NaturalLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      // Without leading zeros, the longer run is the larger number.
      std::string_view x = a.substr(i, ei - i), y = b.substr(j, ej - j);
      while (x.size() > 1 && x[0] == '0') x.remove_prefix(1);
      while (y.size() > 1 && y[0] == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) {
      return static_cast<unsigned char>(a[i]) <
             static_cast<unsigned char>(b[j]);
    }
    ++i;
    ++j;
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal under the order: fall back to bytes
}

Result<TensorDescriptor> WholeTensorOf(const TensorDescriptor& t) {
  TensorDescriptorSpec spec;
  spec.tensor_id = t.tensor_id();
  spec.global_shape = t.global_shape();
  spec.dtype = t.dtype();
  spec.itemsize = t.itemsize();
  spec.layout_fingerprint = t.layout_fingerprint();
  spec.layer_id = t.layer_id();
  spec.expert_id = t.expert_id();
  return TensorDescriptor::Make(std::move(spec));
}

}  // namespace internal

namespace {

using internal::Printable;

struct Entry {
  const TensorDescriptor* t;
  const SafetensorsDtype* dtype;
  uint64_t nbytes;
};

std::string FileName(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

// The header of one file: the entries in order; sets each entry's
// relative offset.
std::string Header(const std::vector<const Entry*>& entries,
                   const std::map<std::string, std::string>& metadata,
                   std::vector<uint64_t>* begins) {
  std::vector<SafetensorsTensor> tensors;
  uint64_t at = 0;
  for (const Entry* e : entries) {
    begins->push_back(at);
    tensors.push_back({e->t->tensor_id(), std::string(e->dtype->name),
                       e->t->global_shape(), at, at + e->nbytes});
    at += e->nbytes;
  }
  return EncodeSafetensorsHeader(tensors, metadata);
}

// The checkpoint as a placement: one participant holding every tensor
// whole, with the placement's identity.
Result<WeightPlacementManifest> CheckpointPlacement(
    const std::vector<TensorDescriptor>& source, PlacementHeader header) {
  ParallelTopologySpec topo;
  topo.participants.push_back({"checkpoint", {}});
  RESHARD_ASSIGN_OR_RETURN(auto topology, ParallelTopology::Make(topo));
  std::vector<TensorDescriptor> tensors;
  std::vector<PlacementFragment> fragments;
  for (const TensorDescriptor& t : source) {
    RESHARD_ASSIGN_OR_RETURN(auto whole, internal::WholeTensorOf(t));
    tensors.push_back(std::move(whole));
    PlacementFragmentSpec f;
    f.tensor_id = t.tensor_id();
    f.global_offset.assign(t.ndim(), 0);
    f.local_shape = t.global_shape();
    f.nbytes = t.num_elements() * static_cast<uint64_t>(t.itemsize());
    RESHARD_ASSIGN_OR_RETURN(auto frag, PlacementFragment::Make(std::move(f)));
    fragments.push_back(std::move(frag));
  }
  header.placement_set_id = "hf-checkpoint";
  return WeightPlacementManifest::FromFragments(
      std::move(header), std::move(topology), std::move(tensors),
      std::move(fragments));
}

// Groups the entries (natural order) into files of at most `max` data
// bytes.
std::vector<std::vector<const Entry*>> AssignFiles(
    const std::vector<Entry>& entries, uint64_t max) {
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return internal::NaturalLess(a->t->tensor_id(), b->t->tensor_id());
  });
  std::vector<std::vector<const Entry*>> files(1);
  uint64_t bytes = 0;
  for (const Entry* e : order) {
    if (!files.back().empty() && bytes + e->nbytes > max) {
      files.emplace_back();
      bytes = 0;
    }
    files.back().push_back(e);
    bytes += e->nbytes;
  }
  // Within a file: larger items first, so every tensor is aligned.
  for (auto& f : files) {
    std::stable_sort(f.begin(), f.end(), [](const Entry* a, const Entry* b) {
      return a->dtype->itemsize > b->dtype->itemsize;
    });
  }
  return files;
}

std::string IndexJson(const CheckpointWritePlan::State& s) {
  std::string json;
  internal::CanonicalJsonWriter w(&json);
  w.BeginObject();
  w.Key("metadata");
  w.BeginObject();
  w.KeyUInt("total_size", s.tensor_bytes);
  w.EndObject();
  w.Key("weight_map");
  w.BeginObject();
  for (const CheckpointWriteTensor& t : s.tensors) {
    w.KeyString(t.name, s.files[t.file].name);
  }
  w.EndObject();
  w.EndObject();
  return json + "\n";
}

}  // namespace

namespace internal {

Result<std::shared_ptr<CheckpointWritePlan::State>> PlanCheckpointFiles(
    const std::vector<TensorDescriptor>& tensors, PlacementHeader header,
    const CheckpointWriteOptions& options) {
  std::vector<Entry> entries;
  for (const TensorDescriptor& t : tensors) {
    const SafetensorsDtype* d = FindSafetensorsDtypeByPlacement(t.dtype());
    if (d == nullptr || d->itemsize != t.itemsize()) {
      return Status::InvalidArgument(
          "tensor " + Printable(t.tensor_id()) + " has dtype " +
          Printable(t.dtype()) + " (itemsize " + std::to_string(t.itemsize()) +
          "), which safetensors cannot store");
    }
    if (t.tensor_id() == "__metadata__") {
      return Status::InvalidArgument(
          "a tensor named __metadata__ cannot be stored in safetensors");
    }
    entries.push_back(
        {&t, d, t.num_elements() * static_cast<uint64_t>(t.itemsize())});
  }
  RESHARD_ASSIGN_OR_RETURN(auto checkpoint,
                           CheckpointPlacement(tensors, std::move(header)));
  auto s =
      std::make_shared<CheckpointWritePlan::State>(CheckpointWritePlan::State{
          {}, {}, {}, 0, {}, std::move(checkpoint), std::nullopt});
  const auto groups = AssignFiles(entries, options.max_file_bytes);
  for (size_t k = 0; k < groups.size(); ++k) {
    std::vector<uint64_t> begins;
    CheckpointWriteFile f;
    f.name = FileName(k, groups.size());
    f.header = Header(groups[k], options.metadata, &begins);
    f.size = f.header.size();
    for (size_t i = 0; i < groups[k].size(); ++i) {
      const Entry& e = *groups[k][i];
      s->tensors.push_back(
          {e.t->tensor_id(), k, f.header.size() + begins[i], e.nbytes});
      f.size += e.nbytes;
      s->tensor_bytes += e.nbytes;
    }
    s->files.push_back(std::move(f));
  }
  std::sort(s->tensors.begin(), s->tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  s->index_json = IndexJson(*s);
  return s;
}

}  // namespace internal

Result<CheckpointWritePlan> PlanCheckpointWrite(
    const WeightPlacementManifest& placement,
    const CheckpointWriteOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      auto s, internal::PlanCheckpointFiles(placement.tensors(),
                                            placement.header(), options));
  RESHARD_ASSIGN_OR_RETURN(auto plan,
                           LogicalTransferPlan::Make(placement, s->checkpoint));
  s->plan = std::move(plan);
  s->source_placement_id = placement.placement_id();
  return CheckpointWritePlan(std::move(s));
}

const std::vector<CheckpointWriteFile>& CheckpointWritePlan::files() const {
  return state_->files;
}
const std::vector<CheckpointWriteTensor>& CheckpointWritePlan::tensors() const {
  return state_->tensors;
}
const std::string& CheckpointWritePlan::index_json() const {
  return state_->index_json;
}
uint64_t CheckpointWritePlan::tensor_bytes() const {
  return state_->tensor_bytes;
}

}  // namespace reshard
