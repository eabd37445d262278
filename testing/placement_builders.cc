#include "testing/placement_builders.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

namespace reshard::testing {

std::string ParticipantId(const ParallelRank& r) {
  return "p-d" + std::to_string(r.dp) + "-p" + std::to_string(r.pp) + "-e" +
         std::to_string(r.ep) + "-t" + std::to_string(r.tp);
}

PlacementDraft GridDraft(Sizes sizes) {
  PlacementDraft d;
  d.topology.sizes.dp = sizes.dp;
  d.topology.sizes.pp = sizes.pp;
  d.topology.sizes.ep = sizes.ep;
  d.topology.sizes.tp = sizes.tp;
  for (int64_t dp = 0; dp < sizes.dp; ++dp) {
    for (int64_t pp = 0; pp < sizes.pp; ++pp) {
      for (int64_t ep = 0; ep < sizes.ep; ++ep) {
        for (int64_t tp = 0; tp < sizes.tp; ++tp) {
          ParallelRank r{dp, tp, pp, ep};
          d.topology.participants.push_back({ParticipantId(r), r});
        }
      }
    }
  }
  return d;
}

void AddTensor(PlacementDraft* d, const TensorLayout& l) {
  Status st =
      internal::AppendTensorLayout(d->topology, l, &d->tensors, &d->fragments);
  if (!st.ok()) {
    std::fprintf(stderr, "AddTensor: %s\n", st.ToString().c_str());
    std::abort();
  }
}

PlacementDraft LargeExpertDraft() {
  PlacementDraft draft = GridDraft({1, 1, 16, 16});
  for (int t = 0; t < 96; ++t) {
    AddTensor(&draft,
              {.tensor_id = "layers." + std::to_string(t) + ".experts.w",
               .shape = {32, 64, 8},
               .tp_dim = 1,
               .ep_split = true,
               .layer_id = t});
  }
  return draft;
}

Result<WeightPlacementManifest> PlacementDraft::Build() const {
  RESHARD_ASSIGN_OR_RETURN(auto topo, ParallelTopology::Make(topology));
  std::vector<TensorDescriptor> ts;
  for (const auto& t : tensors) {
    RESHARD_ASSIGN_OR_RETURN(auto td, TensorDescriptor::Make(t));
    ts.push_back(std::move(td));
  }
  std::vector<PlacementFragment> fs;
  fs.reserve(fragments.size());
  for (const auto& f : fragments) {
    RESHARD_ASSIGN_OR_RETURN(auto pf, PlacementFragment::Make(f));
    fs.push_back(std::move(pf));
  }
  return WeightPlacementManifest::FromFragments(header, std::move(topo),
                                                std::move(ts), std::move(fs));
}

RuntimeBindingFragmentSpec FakeRuntimeFragment(const PlacementFragment& f,
                                               int64_t itemsize,
                                               uint64_t address) {
  RuntimeBindingFragmentSpec s;
  s.placement_fragment_id = f.placement_fragment_id();
  s.runtime_fragment_id = "rt-" + f.placement_fragment_id().substr(7, 24);
  s.address = address;
  s.nbytes = f.nbytes();
  s.worker_id = "worker-" + ParticipantId(f.rank());
  s.endpoint = "endpoint-" + ParticipantId(f.rank());
  s.device = "cpu";
  s.itemsize = itemsize;
  s.local_shape = f.local_shape();
  s.strides_bytes =
      CanonicalStrides(f.local_shape(), itemsize).value_or(Dims{});
  s.storage_address = address;
  s.storage_nbytes = f.nbytes();
  s.storage_offset_bytes = 0;
  return s;
}

BindingBuilder& BindingBuilder::Instance(std::string instance_id) {
  instance_ = std::move(instance_id);
  return *this;
}

BindingBuilder& BindingBuilder::Generation(uint64_t generation) {
  generation_ = generation;
  return *this;
}

BindingBuilder& BindingBuilder::Lease(std::string lease_id) {
  return LeaseOf([lease_id](const std::string&) { return lease_id; });
}

BindingBuilder& BindingBuilder::LeaseOf(
    std::function<std::string(const std::string&)> f) {
  lease_of_ = std::move(f);
  return *this;
}

BindingBuilder& BindingBuilder::Addresses(uint64_t base, uint64_t stride) {
  base_and_stride_ = {base, stride};
  address_of_ = nullptr;
  return *this;
}

BindingBuilder& BindingBuilder::AddressOf(
    std::function<uint64_t(const PlacementFragment&)> address_of) {
  address_of_ = std::move(address_of);
  base_and_stride_.reset();
  return *this;
}

BindingBuilder& BindingBuilder::AdjustEach(Adjust adjust) {
  adjust_.push_back(std::move(adjust));
  return *this;
}

// The address of `f`; `cursor` is the running address of the default and
// the Addresses() layouts.
uint64_t BindingBuilder::NextAddress(const PlacementFragment& f,
                                     uint64_t* cursor) const {
  if (address_of_) return address_of_(f);
  const uint64_t address = *cursor;
  *cursor += base_and_stride_ ? base_and_stride_->second
                              : (f.nbytes() + 0xFFF) & ~uint64_t{0xFFF};
  return address;
}

Result<std::vector<WeightRuntimeBindingManifest>> BindingBuilder::Build()
    const {
  std::vector<WeightRuntimeBindingManifest> out;
  uint64_t cursor = base_and_stride_ ? base_and_stride_->first : 0;
  for (const auto& part : placement_.parts()) {
    if (part.fragments().empty()) continue;
    const std::string& participant = part.participant_id();
    WeightRuntimeBindingManifestSpec s;
    s.resource_id = placement_.resource_id();
    s.placement_id = placement_.placement_id();
    s.placement_digest = placement_.digest();
    s.instance_id = instance_ ? *instance_ : "instance-" + participant;
    s.generation = generation_;
    s.lease_id = lease_of_ ? lease_of_(participant) : "lease-1";
    s.revision = placement_.revision();
    s.participant_id = participant;
    // Without a layout, every participant is its own address space.
    if (!base_and_stride_) cursor = 0x10000;
    for (const auto& f : part.fragments()) {
      const TensorDescriptor* t = placement_.FindTensor(f.tensor_id());
      RuntimeBindingFragmentSpec view =
          FakeRuntimeFragment(f, t->itemsize(), NextAddress(f, &cursor));
      for (const auto& adjust : adjust_) adjust(participant, &view);
      RESHARD_ASSIGN_OR_RETURN(auto fragment,
                               RuntimeBindingFragment::Make(std::move(view)));
      s.fragments.push_back(std::move(fragment));
    }
    RESHARD_ASSIGN_OR_RETURN(auto binding,
                             WeightRuntimeBindingManifest::Make(std::move(s)));
    out.push_back(std::move(binding));
  }
  return out;
}

std::vector<WeightRuntimeBindingManifest> FakeBindings(
    const WeightPlacementManifest& placement, uint64_t generation) {
  return BindingBuilder(placement).Generation(generation).Build().ValueOrDie();
}

RuntimeBindingFragmentSpec SpecOf(const RuntimeBindingFragment& f) {
  RuntimeBindingFragmentSpec s;
  s.placement_fragment_id = f.placement_fragment_id();
  s.runtime_fragment_id = f.runtime_fragment_id();
  s.address = f.address();
  s.nbytes = f.nbytes();
  s.worker_id = f.worker_id();
  s.endpoint = f.endpoint();
  s.device = f.device();
  s.itemsize = f.itemsize();
  s.local_shape = f.local_shape();
  s.strides_bytes = f.strides_bytes();
  s.storage_address = f.storage_address();
  s.storage_nbytes = f.storage_nbytes();
  s.storage_offset_bytes = f.storage_offset_bytes();
  s.owner = f.owner();
  return s;
}

WeightRuntimeBindingManifestSpec SpecOf(const WeightRuntimeBindingManifest& b) {
  WeightRuntimeBindingManifestSpec s;
  s.resource_id = b.resource_id();
  s.placement_id = b.placement_id();
  s.placement_digest = b.placement_digest();
  s.instance_id = b.instance_id();
  s.generation = b.generation();
  s.lease_id = b.lease_id();
  s.revision = b.revision();
  s.participant_id = b.participant_id();
  s.fragments = b.fragments();
  return s;
}

Result<WeightRuntimeBindingManifest> WithBindingChanges(
    const WeightRuntimeBindingManifest& binding,
    const BindingChanges& changes) {
  WeightRuntimeBindingManifestSpec s = SpecOf(binding);
  if (changes.instance) s.instance_id = *changes.instance;
  if (changes.lease) s.lease_id = *changes.lease;
  if (changes.generation) s.generation = *changes.generation;
  if (changes.device || changes.address_shift != 0) {
    for (auto& f : s.fragments) {
      RuntimeBindingFragmentSpec fs = SpecOf(f);
      if (changes.device) fs.device = *changes.device;
      fs.address += changes.address_shift;
      fs.storage_address += changes.address_shift;
      RESHARD_ASSIGN_OR_RETURN(f, RuntimeBindingFragment::Make(std::move(fs)));
    }
  }
  return WeightRuntimeBindingManifest::Make(std::move(s));
}

StoredWeightManifestSpec StoredSpecFrom(const WeightPlacementManifest& m,
                                        const std::string& group) {
  StoredWeightManifestSpec s;
  s.namespace_ = "ns";
  s.resource_id = m.resource_id();
  s.revision = m.revision();
  s.weight_generation = m.weight_generation();
  s.group_id = group;
  s.manifest_key = group + "/manifest";
  s.created_at = "2026-07-23T00:00:00Z";
  s.tensors = m.tensors();
  // Per tensor, the rank projected on its non-split axes picks the group.
  auto group_key = [&](const PlacementFragment& f) {
    const TensorDescriptor* t = m.FindTensor(f.tensor_id());
    std::array<int64_t, 4> k{-1, -1, -1, -1};
    for (const auto& axis : t->parallel_axes()) {
      if (axis.semantics() != AxisSemantics::kSplit) {
        k[static_cast<size_t>(axis.kind())] = f.rank().Get(axis.kind());
      }
    }
    return k;
  };
  std::map<std::string, std::array<int64_t, 4>> chosen;
  for (const auto* f : m.fragments()) {
    auto k = group_key(*f);
    auto [it, inserted] = chosen.emplace(f->tensor_id(), k);
    if (!inserted && k < it->second) it->second = k;
  }
  std::map<std::string, uint64_t> object_size;
  for (const auto& part : m.parts()) {
    for (const auto& f : part.fragments()) {
      if (group_key(f) != chosen.at(f.tensor_id())) continue;
      const std::string object = group + "/payload/" + part.participant_id();
      uint64_t& offset = object_size[object];
      s.fragments.push_back(
          {"stored-" + f.placement_fragment_id().substr(7, 16), f.tensor_id(),
           f.global_offset(), f.local_shape(), object, offset, f.nbytes(),
           f.aliases()});
      offset += f.nbytes();
    }
  }
  return s;
}

std::string ReadTestData(const std::string& relative_path) {
  const std::string path = std::string(RESHARD_TEST_DATA) + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read test data " + path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

std::vector<ScenarioPair> ScenarioPairs(uint64_t max_bytes) {
  const std::string text = ReadTestData("scenarios/expected.json");
  simdjson::dom::parser parser;
  simdjson::dom::object plans = parser.parse(text)["plans"];
  std::vector<ScenarioPair> out;
  for (auto [key, entry] : plans) {
    // A named copy: lambdas cannot capture structured bindings before
    // C++20's P1091 (clang < 16).
    const simdjson::dom::element value = entry;
    simdjson::dom::element error;
    if (value["error"].get(error) == simdjson::SUCCESS) continue;
    if (uint64_t(value["bytes"]) > max_bytes) continue;
    auto load = [&](const char* side) {
      auto m = WeightPlacementFromJson(ReadTestData(
          "scenarios/" + std::string(std::string_view(value[side]))));
      if (!m.ok()) {
        std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
        std::abort();
      }
      return *std::move(m);
    };
    out.push_back({std::string(key), load("source"), load("target"),
                   uint64_t(value["bytes"]), uint64_t(value["regions"])});
  }
  return out;
}

WeightPlacementManifest CubeLayout(int64_t tp, int64_t dim, const Dims& shape) {
  auto draft = GridDraft({1, 1, 1, tp});
  AddTensor(&draft, {.tensor_id = "w",
                     .shape = shape,
                     .dtype = "uint8",
                     .itemsize = 1,
                     .tp_dim = dim});
  auto m = draft.Build();
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::abort();
  }
  return *std::move(m);
}

WeightPlacementManifest TpLayout(int64_t dp, int64_t tp) {
  auto d = GridDraft({.dp = dp, .tp = tp});
  AddTensor(&d, {.tensor_id = "attn.qkv", .shape = {64, 48}, .tp_dim = 0});
  AddTensor(&d, {.tensor_id = "attn.out", .shape = {32, 96}, .tp_dim = 1});
  AddTensor(&d, {.tensor_id = "norm", .shape = {96}});
  AddTensor(&d, {.tensor_id = "bias",
                 .shape = {40},
                 .dtype = "float32",
                 .itemsize = 4,
                 .tp_dim = 0});
  auto m = d.Build();
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::abort();
  }
  return *std::move(m);
}

namespace {

std::string Ints(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += (i ? "," : "") + std::to_string(d[i]);
  }
  return s + "]";
}

std::string Opt(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "null";
}

}  // namespace

// Writes one legacy inventory per participant of `m`, with views packed
// into one allocation per participant, exactly as an old adapter would.
std::vector<std::string> LegacyInventories(const WeightPlacementManifest& m,
                                           bool legacy_partition_dim) {
  std::vector<std::string> out;
  for (const auto& part : m.parts()) {
    if (part.fragments().empty()) continue;
    uint64_t total = 0;
    for (const auto& f : part.fragments()) total += f.nbytes();
    std::string inv =
        "{\"generation\":" + std::to_string(m.weight_generation()) +
        ",\"instance_id\":\"inst-" + part.participant_id() +
        "\",\"lease_id\":\"lease\",\"model_id\":\"" + m.resource_id() +
        "\",\"revision\":\"" + m.revision() + "\",\"tensors\":[";
    uint64_t offset = 0;
    bool first = true;
    for (const auto& f : part.fragments()) {
      const TensorDescriptor* t = m.FindTensor(f.tensor_id());
      std::string axes = "[";
      bool first_axis = true;
      bool one_dim_tp = false;
      for (const auto& a : t->parallel_axes()) {
        if (legacy_partition_dim && a.kind() == AxisKind::kTp &&
            a.semantics() == AxisSemantics::kSplit &&
            t->shard_dims().size() == 1) {
          one_dim_tp = true;  // expressed through partition_dim instead
          continue;
        }
        axes +=
            std::string(first_axis ? "" : ",") + "{\"kind\":\"" +
            std::string(AxisKindName(a.kind())) + "\",\"split_dim\":" +
            (a.semantics() == AxisSemantics::kSplit ? std::to_string(a.dim())
                                                    : std::string("null")) +
            "}";
        first_axis = false;
      }
      axes += "]";
      std::string aliases = "[";
      for (size_t i = 0; i < f.aliases().size(); ++i) {
        aliases += std::string(i ? "," : "") + "\"" + f.aliases()[i] + "\"";
      }
      aliases += "]";
      const uint64_t base = 0x100000;
      inv +=
          std::string(first ? "" : ",") +
          "{\"address\":" + std::to_string(base + offset) +
          ",\"aliases\":" + aliases +
          ",\"byte_offset\":" + std::to_string(offset) +
          ",\"device\":\"cpu\",\"dtype\":\"" + t->dtype() +
          "\",\"endpoint\":\"ep-" + part.participant_id() +
          "\",\"expert_axis\":0,\"expert_id\":" + Opt(t->expert_id()) +
          ",\"fragment_id\":\"rt-" + f.placement_fragment_id().substr(7, 24) +
          "\",\"global_offset\":" + Ints(f.global_offset()) +
          ",\"global_shape\":" + Ints(t->global_shape()) +
          ",\"is_contiguous\":true,\"itemsize\":" +
          std::to_string(t->itemsize()) +
          ",\"layer_id\":" + Opt(t->layer_id()) + ",\"layout_fingerprint\":\"" +
          t->layout_fingerprint() +
          "\",\"lease_generation\":1,\"local_shape\":" + Ints(f.local_shape()) +
          ",\"nbytes\":" + std::to_string(f.nbytes()) +
          ",\"parallel_axes\":" + axes + ",\"partition_dim\":" +
          (one_dim_tp ? std::to_string(t->shard_dims()[0]) : "null") +
          ",\"rank\":{\"dp\":" + std::to_string(f.rank().dp) +
          ",\"ep\":" + std::to_string(f.rank().ep) +
          ",\"moe_dp\":0,\"pp\":" + std::to_string(f.rank().pp) +
          ",\"tp\":" + std::to_string(f.rank().tp) + "},\"runtime_name\":\"" +
          f.tensor_id() + "\",\"shard_dims\":" +
          (one_dim_tp ? std::string("[]") : Ints(t->shard_dims())) +
          ",\"storage_address\":" + std::to_string(base) +
          ",\"storage_nbytes\":" + std::to_string(total) +
          ",\"storage_offset\":0,\"storage_offset_bytes\":" +
          std::to_string(offset) + ",\"stride\":[],\"strides_bytes\":" +
          Ints(*CanonicalStrides(f.local_shape(), t->itemsize())) +
          ",\"tensor_id\":\"" + f.tensor_id() + "\",\"worker_id\":\"w-" +
          part.participant_id() + "\"}";
      offset += f.nbytes();
      first = false;
    }
    out.push_back(inv + "]}");
  }
  return out;
}

}  // namespace reshard::testing
