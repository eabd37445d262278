#include "selftest/host_buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "reshard/api.h"

namespace reshard::internal {

namespace {

// One allocation of `f`'s bytes (AllocateHostBytes).
Result<HostBuffer> AllocateFragment(const PlacementFragment& f) {
  HostBuffer buf = AllocateHostBytes(f.nbytes());
  if (!buf) {
    return Status::ResourceExhausted("cannot allocate " +
                                     std::to_string(f.nbytes()) +
                                     " bytes for " + f.placement_fragment_id());
  }
  return buf;
}

bool Selected(const std::vector<std::string>& participants,
              const std::string& participant_id) {
  return participants.empty() ||
         std::find(participants.begin(), participants.end(), participant_id) !=
             participants.end();
}

}  // namespace

Result<HostBuffers> AllocateHostBuffers(
    const WeightPlacementManifest& m, const std::string& instance,
    const std::vector<std::string>& participants) {
  HostBuffers side;
  std::vector<CheckedBindings> parts;
  auto buffer_of = [&side](std::string_view id) -> void* {
    auto it = side.data.find(id);
    return it == side.data.end() ? nullptr : it->second;
  };
  for (const auto& part : m.parts()) {
    if (part.fragments().empty()) continue;
    if (!Selected(participants, part.participant_id())) continue;
    for (const auto& f : part.fragments()) {
      RESHARD_ASSIGN_OR_RETURN(HostBuffer buf, AllocateFragment(f));
      side.data.emplace(f.placement_fragment_id(), buf.get());
      side.buffers.push_back(std::move(buf));
    }
    // Each participant is its own worker in the instance.
    RESHARD_ASSIGN_OR_RETURN(
        auto binding, BindCheckedBuffers(m, part.participant_id(), buffer_of,
                                         {.instance_id = instance,
                                          .generation = 1,
                                          .lease_id = "host-lease",
                                          .worker_id = part.participant_id(),
                                          .endpoint = "local",
                                          .device = "cpu"}));
    side.bindings.push_back(binding.bindings().front());
    parts.push_back(std::move(binding));
  }
  RESHARD_ASSIGN_OR_RETURN(
      side.checked, CheckedBindings::Merge(m, parts, BindingCoverage::kSubset));
  return side;
}

// Best-of-3 bandwidth of `threads` parallel memcpys over `bytes` in total.
double MeasureMemcpyGbps(uint64_t bytes, uint32_t threads) {
  bytes = std::max<uint64_t>(bytes, 1 << 20);
  std::vector<uint8_t> from(bytes, 0x5A);
  std::vector<uint8_t> to(bytes, 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    const uint64_t per = (bytes + threads - 1) / threads;
    for (uint32_t t = 0; t < threads; ++t) {
      const uint64_t begin = std::min<uint64_t>(bytes, t * per);
      const uint64_t end = std::min<uint64_t>(bytes, begin + per);
      workers.emplace_back([&, begin, end] {
        std::memcpy(to.data() + begin, from.data() + begin, end - begin);
      });
    }
    for (auto& w : workers) w.join();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace reshard::internal
