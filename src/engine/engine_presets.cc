// MakeEngineLayout: the preset by engine spec, resolved against the
// presets' release tables (docs/engines.md).

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "engine/presets.h"
#include "util/printable.h"

namespace reshard {

namespace internal {
namespace {

// A release as its numbers, trailing zeros dropped ("0.33.0" == "0.33").
using Version = std::vector<int64_t>;

// One range [from, below) of a preset's table; an empty bound is open.
struct ReleaseRange {
  Version from, below;
  EngineRelease release;
};

struct Preset {
  std::string name;
  std::vector<ReleaseRange> ranges;  // newest first
};

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> kPresets = [] {
    std::vector<Preset> p;
    p.push_back({"hf", {{{}, {}, {"hf", "hf", false, false}}}});
    p.push_back(
        {"megatron", {{{}, {}, {"megatron", "megatron", false, true}}}});
    p.push_back({"sglang", {{{}, {}, {"sglang", "sglang", false, true}}}});
    p.push_back(
        {"vllm",
         {{{0, 33}, {0, 34}, {"vllm", "vllm@0.33", true, true, true}},
          {{0, 10, 2}, {0, 33}, {"vllm", "vllm@<0.33", false, true, true}},
          {{}, {0, 10, 2}, {"vllm", "vllm@<0.10.2", false, false, true}}}});
    return p;
  }();
  return kPresets;
}

// "0.33", "0.33.1": one to three dot-separated decimal numbers (digits
// only, at most nine each); nullopt otherwise.
std::optional<Version> ParseVersion(std::string_view s) {
  Version v;
  while (true) {
    const size_t dot = s.find('.');
    const std::string_view part = s.substr(0, dot);
    int64_t n = 0;
    if (part.empty() || part.size() > 9 || v.size() == 3 ||
        part.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
    if (ec != std::errc() || end != part.data() + part.size()) {
      return std::nullopt;
    }
    v.push_back(n);
    if (dot == std::string_view::npos) break;
    s.remove_prefix(dot + 1);
  }
  while (v.size() > 1 && v.back() == 0) v.pop_back();
  return v;
}

std::string SupportedList() {
  std::string out;
  for (const Preset& p : Presets()) {
    for (size_t i = 0; i < p.ranges.size(); ++i) {
      if (!out.empty()) out += ", ";
      out += p.ranges[i].release.spec;
      if (i == 0 && p.ranges.size() > 1) out += " (= " + p.name + ")";
    }
  }
  return out;
}

Status BadSpec(std::string_view spec, const std::string& why) {
  return Status::InvalidArgument("engine " + Printable(spec) + ": " + why +
                                 " (supported: " + SupportedList() + ")");
}

}  // namespace

std::vector<std::string> EngineSpecs() {
  std::vector<std::string> out;
  for (const Preset& p : Presets()) {
    for (const ReleaseRange& r : p.ranges) out.push_back(r.release.spec);
  }
  return out;
}

Result<EngineRelease> ResolveEngine(std::string_view spec) {
  const size_t at = spec.find('@');
  const std::string_view name = spec.substr(0, at);
  const Preset* preset = nullptr;
  for (const Preset& p : Presets()) {
    if (p.name == name) preset = &p;
  }
  if (preset == nullptr) return BadSpec(spec, "unknown engine");
  if (at == std::string_view::npos) return preset->ranges.front().release;
  std::string_view rel = spec.substr(at + 1);
  if (preset->ranges.size() == 1 && preset->ranges.front().from.empty() &&
      preset->ranges.front().below.empty()) {
    return BadSpec(spec, "the " + preset->name +
                             " preset has one layout for every release; "
                             "name it without a release");
  }
  const bool below = rel.starts_with('<');
  if (below) rel.remove_prefix(1);
  const std::optional<Version> v = ParseVersion(rel);
  if (!v) {
    return BadSpec(spec,
                   "a release is NAME@X.Y[.Z] or NAME@<X.Y[.Z] (decimal "
                   "numbers)");
  }
  if (below) {
    for (const ReleaseRange& r : preset->ranges) {
      if (!r.below.empty() && r.below == *v) return r.release;
    }
    return BadSpec(spec, "not the end of a release range of the " +
                             preset->name +
                             " preset (releases below it are laid out in "
                             "more than one way)");
  }
  for (const ReleaseRange& r : preset->ranges) {
    if ((r.from.empty() || r.from <= *v) && (r.below.empty() || *v < r.below)) {
      return r.release;
    }
  }
  return BadSpec(spec, "release " + std::string(rel) +
                           " is newer than the newest the preset describes");
}

bool HoldsFloat32(const EngineRelease& release, HfArch arch,
                  std::string_view tensor_id) {
  if (release.name == "vllm" && arch == HfArch::kGlm4Moe &&
      tensor_id.ends_with(".mlp.gate.weight")) {
    return true;
  }
  if (release.f32_router_bias &&
      tensor_id.ends_with(".gate.e_score_correction_bias")) {
    return true;
  }
  return (release.name == "vllm" || release.name == "sglang") &&
         tensor_id.ends_with(".linear_attn.A_log");
}

const TensorDescriptor* FirstConversionBeyondWidening(
    const HfCheckpoint& checkpoint, const EngineLayout& layout, HfArch arch) {
  const Result<EngineRelease> release = ResolveEngine(layout.engine());
  for (const TensorDescriptor& t : layout.placement().tensors()) {
    const CheckpointTensor* c = checkpoint.FindTensor(t.tensor_id());
    if (c == nullptr || c->dtype == t.dtype()) continue;
    if (release.ok() && HoldsFloat32(*release, arch, t.tensor_id()) &&
        t.dtype() == "float32" &&
        (c->dtype == "bfloat16" || c->dtype == "float16")) {
      continue;
    }
    return &t;
  }
  return nullptr;
}

}  // namespace internal

Result<EngineLayoutOptions::SequenceParallelMoe> ParseSequenceParallelMoe(
    std::string_view text) {
  using Spm = EngineLayoutOptions::SequenceParallelMoe;
  if (text == "auto") return Spm::kAuto;
  if (text == "on") return Spm::kOn;
  if (text == "off") return Spm::kOff;
  return Status::InvalidArgument(
      "sequence-parallel MoE must be auto, on or off, not " +
      internal::Printable(text));
}

std::vector<std::string_view> EngineNames() {
  return {"hf", "megatron", "sglang", "vllm"};
}

namespace {

// The canonical tensors as HfLayout lays them out: one parameter per
// fragment, under the tensor's own name (or <tensor>#<section> for the
// boxes of a sectioned split) and the fragment's shape.
Result<EngineLayout> HfEngineLayout(std::string_view config_json,
                                    const EngineLayoutOptions& o,
                                    const HfCheckpoint* checkpoint) {
  HfLayoutOptions ho;
  ho.sizes = o.sizes;
  ho.resource_id = o.resource_id;
  ho.revision = o.revision;
  ho.weight_generation = o.weight_generation;
  ho.quantize = o.quantize;
  ho.block = o.block;
  ho.dtype = o.dtype;
  RESHARD_ASSIGN_OR_RETURN(auto placement,
                           HfLayout(config_json, ho, checkpoint));
  std::vector<EngineParticipant> participants;
  for (const WeightPlacementPart& part : placement.parts()) {
    EngineParticipant p{part.participant_id(), {}};
    // A sectioned split (conv1d's [q | k | v], fused gate_up's
    // [gate | up]) gives a rank one box per section of one tensor: those
    // parameters are <tensor>#<section>, numbered from 0 in the order of
    // the boxes' offsets in the tensor (the sections' order).
    std::map<std::string_view, std::vector<const PlacementFragment*>> boxes;
    for (const PlacementFragment& f : part.fragments()) {
      boxes[f.tensor_id()].push_back(&f);
    }
    for (size_t i = 0; i < part.fragments().size(); ++i) {
      const PlacementFragment& f = part.fragments()[i];
      const TensorDescriptor& t = part.tensors()[part.fragment_tensor(i)];
      std::string name = f.tensor_id();
      const auto& mine = boxes[f.tensor_id()];
      if (mine.size() > 1) {
        const auto before = std::count_if(
            mine.begin(), mine.end(), [&](const PlacementFragment* g) {
              return g->global_offset().ToVector() <
                     f.global_offset().ToVector();
            });
        name += "#" + std::to_string(before);
      }
      p.parameters.push_back({std::move(name),
                              f.local_shape(),
                              t.dtype(),
                              t.itemsize(),
                              {{0, f.nbytes(), f.placement_fragment_id()}}});
    }
    participants.push_back(std::move(p));
  }
  return EngineLayout::Make("hf", std::move(placement),
                            std::move(participants));
}

}  // namespace

Result<EngineLayout> MakeEngineLayout(std::string_view config_json,
                                      const EngineLayoutOptions& options,
                                      const HfCheckpoint* checkpoint) {
  RESHARD_ASSIGN_OR_RETURN(internal::EngineRelease release,
                           internal::ResolveEngine(options.engine));
  if (options.sequence_parallel_moe !=
          EngineLayoutOptions::SequenceParallelMoe::kAuto &&
      release.name != "vllm" && release.name != "sglang") {
    return Status::InvalidArgument(
        "sequence-parallel MoE (--sequence-parallel-moe) is vLLM's and "
        "SGLang's; the " +
        release.name + " preset takes only auto");
  }
  if (release.name == "hf") {
    return HfEngineLayout(config_json, options, checkpoint);
  }
  const std::pair<const char*, int64_t> sizes[] = {{"tp", options.sizes.tp},
                                                   {"pp", options.sizes.pp},
                                                   {"ep", options.sizes.ep},
                                                   {"dp", options.sizes.dp}};
  for (const auto& [name, v] : sizes) {
    if (v < 1 || v > 65535) {
      return Status::InvalidArgument(std::string("--") + name +
                                     " must be in [1, 65535], got " +
                                     std::to_string(v));
    }
  }
  if (options.sizes.tp * options.sizes.pp * options.sizes.dp >
      (int64_t{1} << 20)) {
    return Status::InvalidArgument("a grid of more than 2^20 participants");
  }
  RESHARD_ASSIGN_OR_RETURN(internal::HfConfig c,
                           internal::ParseHfConfig(config_json));
  if (checkpoint != nullptr) {
    RESHARD_RETURN_NOT_OK(internal::AdaptToCheckpoint(*checkpoint, &c));
  }
  RESHARD_ASSIGN_OR_RETURN(
      auto canon, internal::CanonTensors::Make(&c, checkpoint, options));
  canon.SetFloat32([&release, &c](std::string_view name) {
    return internal::HoldsFloat32(release, c.arch, name);
  });
  if (release.name == "megatron") {
    return internal::MegatronLayout(c, canon, options, release);
  }
  return internal::VllmLayout(c, canon, options, release);
}

}  // namespace reshard
