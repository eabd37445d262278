#include "selftest/host_buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace reshard::internal {

Result<HostBuffers> AllocateHostBuffers(
    const WeightPlacementManifest& m, const std::string& instance,
    const std::vector<std::string>& participants) {
  HostBuffers side;
  for (const auto& part : m.parts()) {
    if (part.fragments().empty()) continue;
    if (!participants.empty() &&
        std::find(participants.begin(), participants.end(),
                  part.participant_id()) == participants.end()) {
      continue;
    }
    WeightRuntimeBindingManifestSpec spec{m.resource_id(),
                                          m.placement_id(),
                                          m.digest(),
                                          instance,
                                          1,
                                          "host-lease",
                                          m.revision(),
                                          part.participant_id(),
                                          {}};
    for (const auto& f : part.fragments()) {
      // Large buffers on 2 MiB boundaries with transparent huge pages:
      // fewer page faults, and fewer pages to pin for zero-copy transports.
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t align = f.nbytes() >= kHuge ? kHuge : 64;
      const size_t size = (f.nbytes() + align - 1) & ~(align - 1);
      HostBuffer buf(static_cast<uint8_t*>(std::aligned_alloc(align, size)));
      if (buf && align == kHuge) ::madvise(buf.get(), size, MADV_HUGEPAGE);
      if (!buf) {
        return Status::ResourceExhausted(
            "cannot allocate " + std::to_string(f.nbytes()) + " bytes for " +
            f.placement_fragment_id());
      }
      const TensorDescriptor* t = m.FindTensor(f.tensor_id());
      RuntimeBindingFragmentSpec r;
      r.placement_fragment_id = f.placement_fragment_id();
      r.fragment_id = instance + ":" + f.placement_fragment_id();
      r.address = reinterpret_cast<uint64_t>(buf.get());
      r.nbytes = f.nbytes();
      r.worker_id = part.participant_id();
      r.endpoint = "local";
      r.device = "cpu";
      r.itemsize = t->itemsize();
      r.local_shape = f.local_shape();
      r.strides_bytes =
          CanonicalStrides(f.local_shape(), t->itemsize()).value_or(Dims{});
      r.storage_address = r.address;
      r.storage_nbytes = f.nbytes();
      RESHARD_ASSIGN_OR_RETURN(auto rf,
                               RuntimeBindingFragment::Make(std::move(r)));
      spec.fragments.push_back(std::move(rf));
      side.data.emplace(f.placement_fragment_id(), buf.get());
      side.buffers.push_back(std::move(buf));
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto b, WeightRuntimeBindingManifest::Make(std::move(spec)));
    side.bindings.push_back(std::move(b));
  }
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
