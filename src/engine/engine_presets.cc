// MakeEngineLayout: the preset by name.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/presets.h"
#include "util/printable.h"

namespace reshard {

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
  const std::string& e = options.engine;
  if (e == "hf") return HfEngineLayout(config_json, options, checkpoint);
  if (e != "megatron" && e != "vllm" && e != "sglang") {
    return Status::InvalidArgument("unknown engine " + internal::Printable(e) +
                                   " (known: hf, megatron, sglang, vllm)");
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
  if (e == "megatron") return internal::MegatronLayout(c, canon, options);
  return internal::VllmLayout(c, canon, options);
}

}  // namespace reshard
