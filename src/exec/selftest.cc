// RunSelfTest: real buffers, real bindings, the real executor.

#include "reshard/selftest.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "reshard/binding.h"
#include "reshard/local_transport.h"
#include "reshard/plan.h"
#include "reshard/transfer_plan.h"

namespace reshard {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// Calls f(local byte offset, global element index, element count) for every
// run of contiguous elements along the last dimension of a fragment.
template <typename F>
void ForEachRow(const Dims& global_shape, const Dims& offset, const Dims& shape,
                int64_t itemsize, F&& f) {
  const size_t n = shape.size();
  Dims idx(n, 0);
  const uint64_t row = static_cast<uint64_t>(shape[n - 1]);
  uint64_t local = 0;
  while (true) {
    uint64_t g = 0;
    for (size_t d = 0; d < n; ++d) {
      g = g * static_cast<uint64_t>(global_shape[d]) +
          static_cast<uint64_t>(offset[d] + idx[d]);
    }
    f(local, g, row);
    local += row * static_cast<uint64_t>(itemsize);
    size_t d = n - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (n == 1) return;
  }
}

struct Side {
  std::vector<Buffer> buffers;
  std::vector<WeightRuntimeBindingManifest> bindings;
  std::unordered_map<std::string_view, uint8_t*> data;  // by fragment id
};

Result<Side> Allocate(const WeightPlacementManifest& m,
                      const std::string& instance) {
  Side side;
  for (const auto& part : m.parts()) {
    if (part.fragments().empty()) continue;
    WeightRuntimeBindingManifestSpec spec{m.resource_id(),
                                          m.placement_id(),
                                          m.digest(),
                                          instance,
                                          1,
                                          "selftest-lease",
                                          m.revision(),
                                          part.participant_id(),
                                          {}};
    for (const auto& f : part.fragments()) {
      const size_t size = (f.nbytes() + 63) & ~size_t{63};
      Buffer buf(static_cast<uint8_t*>(std::aligned_alloc(64, size)));
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
      r.strides_bytes.resize(f.local_shape().size());
      int64_t stride = t->itemsize();
      for (size_t d = f.local_shape().size(); d-- > 0;) {
        r.strides_bytes[d] = stride;
        stride *= f.local_shape()[d];
      }
      r.storage_address = r.address;
      r.storage_nbytes = f.nbytes();
      ASSIGN_OR_RETURN(auto rf, RuntimeBindingFragment::Make(std::move(r)));
      spec.fragments.push_back(std::move(rf));
      side.data.emplace(f.placement_fragment_id(), buf.get());
      side.buffers.push_back(std::move(buf));
    }
    ASSIGN_OR_RETURN(auto b,
                     WeightRuntimeBindingManifest::Make(std::move(spec)));
    side.bindings.push_back(std::move(b));
  }
  return side;
}

}  // namespace

uint8_t SelfTestPatternByte(uint64_t tensor, uint64_t element, uint64_t byte) {
  const uint64_t h = Mix(element * 0x9E3779B97F4A7C15ull + tensor + 1);
  return static_cast<uint8_t>((h >> (8 * (byte % 8))) ^ (byte / 8));
}

Result<SelfTestReport> RunSelfTest(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target,
                                   const SelfTestOptions& options) {
  if (options.transport != "local") {
    return Status::Unimplemented("transport \"" + options.transport +
                                 "\" is not available for the self-test");
  }
  using Clock = std::chrono::steady_clock;
  SelfTestReport report;
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto plan, LogicalTransferPlan::Make(source, target));
  ASSIGN_OR_RETURN(Side src, Allocate(source, "selftest-source"));
  ASSIGN_OR_RETURN(Side dst, Allocate(target, "selftest-target"));
  ASSIGN_OR_RETURN(auto bound, TransferPlan::Bind(plan, source, src.bindings,
                                                  target, dst.bindings));
  report.plan_seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  // Tensor index in the source's sorted order.
  std::unordered_map<std::string_view, uint64_t> tensor_index;
  for (size_t i = 0; i < source.tensors().size(); ++i) {
    tensor_index.emplace(source.tensors()[i].tensor_id(), i);
  }
  for (const auto* f : source.fragments()) {
    const TensorDescriptor* t = source.FindTensor(f->tensor_id());
    const uint64_t ti = tensor_index.at(f->tensor_id());
    uint8_t* base = src.data.at(f->placement_fragment_id());
    const auto item = static_cast<uint64_t>(t->itemsize());
    ForEachRow(t->global_shape(), f->global_offset(), f->local_shape(),
               t->itemsize(), [&](uint64_t local, uint64_t g, uint64_t n) {
                 uint8_t* p = base + local;
                 for (uint64_t e = 0; e < n; ++e) {
                   for (uint64_t b = 0; b < item; ++b) {
                     *p++ = SelfTestPatternByte(ti, g + e, b);
                   }
                 }
               });
  }
  for (const auto* f : target.fragments()) {
    std::memset(dst.data.at(f->placement_fragment_id()), 0xD7, f->nbytes());
  }
  ASSIGN_OR_RETURN(auto transport,
                   LocalTransport::Make({.threads = options.threads}));
  t0 = Clock::now();
  ASSIGN_OR_RETURN(TransferId id, transport->Submit(bound));
  RETURN_NOT_OK(transport->Wait(id));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report.bytes = bound.bytes();
  report.operations = bound.regions().size();
  report.segments = plan.summary().segments;
  // Verify every target byte.
  for (const auto* f : target.fragments()) {
    const TensorDescriptor* t = target.FindTensor(f->tensor_id());
    const uint64_t ti = tensor_index.at(f->tensor_id());
    const uint8_t* base = dst.data.at(f->placement_fragment_id());
    const auto item = static_cast<uint64_t>(t->itemsize());
    ForEachRow(t->global_shape(), f->global_offset(), f->local_shape(),
               t->itemsize(), [&](uint64_t local, uint64_t g, uint64_t n) {
                 if (!report.mismatch.empty()) return;
                 const uint8_t* p = base + local;
                 for (uint64_t e = 0; e < n; ++e) {
                   for (uint64_t b = 0; b < item; ++b, ++p) {
                     const uint8_t want = SelfTestPatternByte(ti, g + e, b);
                     if (*p != want) {
                       report.mismatch =
                           "tensor " + f->tensor_id() + ", fragment " +
                           f->placement_fragment_id() + ", global element " +
                           std::to_string(g + e) + ", byte " +
                           std::to_string(b) + ": expected " +
                           std::to_string(want) + ", got " + std::to_string(*p);
                       return;
                     }
                   }
                 }
               });
    if (!report.mismatch.empty()) break;
  }
  report.verified = report.mismatch.empty();
  return report;
}

}  // namespace reshard
