#include "live/device_mirrors.h"

#include <utility>

#include "bind/binding_copy.h"

namespace reshard::live_internal {
namespace {

bool IsCuda(const RuntimeBindingFragment& f) {
  auto kind = MemoryKindOfDevice(f.device());
  return kind.ok() && *kind == MemoryKind::kCuda;
}

}  // namespace

bool HasCudaFragment(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  for (const auto& b : bindings) {
    for (const auto& f : b.fragments()) {
      if (IsCuda(f)) return true;
    }
  }
  return false;
}

Status RefuseDirectDeviceMemory(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view side, const std::string& session,
    const std::string& exchange, std::string_view reason) {
  for (const auto& b : bindings) {
    for (const auto& f : b.fragments()) {
      if (!IsCuda(f)) continue;
      return Status::FailedPrecondition(
          "live session " + session + ": " + std::string(side) + " fragment " +
          f.placement_fragment_id() + " of participant " + b.participant_id() +
          " (device \"" + f.device() + "\"): exchange \"" + exchange +
          "\" moves CUDA memory directly, and " + std::string(reason) +
          ", which is not built for device memory");
    }
  }
  return Status::OK();
}

Result<DeviceMirrors::Entry*> DeviceMirrors::EntryOf(
    const Key& key, const RuntimeBindingFragment& f, std::string_view side,
    std::string_view participant, bool adopt) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (adopt) {
      it->second.device = f;
    } else if (!(it->second.device == f)) {
      return nullptr;
    }
    return &it->second;
  }
  if (!adopt) return nullptr;
  const uint64_t total = bytes_ + f.nbytes();
  if (total > budget_) {
    return Status::FailedPrecondition(
        "live session " + session_ + ": " + std::string(side) + " fragment " +
        f.placement_fragment_id() + " of participant " +
        std::string(participant) + " (device \"" + f.device() + "\", " +
        std::to_string(f.nbytes()) +
        " bytes) does not fit the pinned host mirrors of CUDA memory: " +
        std::to_string(total) + " bytes in all, past device_staging_bytes (" +
        std::to_string(budget_) + ")");
  }
  RESHARD_ASSIGN_OR_RETURN(
      cuda::PinnedBuffer buffer,
      cuda::PinnedBuffer::Make(staging_.api(), f.nbytes()));
  RESHARD_ASSIGN_OR_RETURN(RuntimeBindingFragment host,
                           cuda::HostStagingFragment(f, buffer.data()));
  if (side == "target") {
    // Whatever the plan leaves unwritten keeps the device's bytes.
    RESHARD_RETURN_NOT_OK(staging_.FromFragment(f, buffer.data()));
  }
  bytes_ = total;
  auto [at, inserted] =
      entries_.emplace(key, Entry{f, std::move(host), std::move(buffer)});
  (void)inserted;
  return &at->second;
}

Result<std::vector<WeightRuntimeBindingManifest>> DeviceMirrors::Mirror(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const WeightPlacementManifest& placement, std::string_view side,
    bool adopt) {
  std::vector<WeightRuntimeBindingManifest> out;
  out.reserve(bindings.size());
  for (const auto& b : bindings) {
    bool mirrored = false;
    std::vector<RuntimeBindingFragment> fragments;
    for (const RuntimeBindingFragment& f : b.fragments()) {
      Entry* entry = nullptr;
      if (IsCuda(f)) {
        const Key key{std::string(side), b.participant_id(),
                      f.placement_fragment_id()};
        RESHARD_ASSIGN_OR_RETURN(
            entry, EntryOf(key, f, side, b.participant_id(), adopt));
      }
      fragments.push_back(entry == nullptr ? f : entry->host);
      mirrored = mirrored || entry != nullptr;
    }
    if (!mirrored) {
      out.push_back(b);
      continue;
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto made,
        internal::RebuiltBinding(b, placement, std::move(fragments)));
    out.push_back(std::move(made));
  }
  return out;
}

Status DeviceMirrors::SourcesToHost() {
  for (auto& [key, e] : entries_) {
    if (std::get<0>(key) != "source") continue;
    RESHARD_RETURN_NOT_OK(
        staging_.FromFragment(e.device, e.buffer.data())
            .WithContext("live session " + session_ +
                         ": copying source "
                         "fragment " +
                         std::get<2>(key) + " of participant " +
                         std::get<1>(key) + " to its host mirror"));
  }
  return Status::OK();
}

Status DeviceMirrors::TargetsToDevice() {
  for (auto& [key, e] : entries_) {
    if (std::get<0>(key) != "target") continue;
    RESHARD_RETURN_NOT_OK(
        staging_.ToFragment(e.buffer.data(), e.device)
            .WithContext("live session " + session_ +
                         ": copying target "
                         "fragment " +
                         std::get<2>(key) + " of participant " +
                         std::get<1>(key) + " from its host mirror"));
  }
  return Status::OK();
}

}  // namespace reshard::live_internal
