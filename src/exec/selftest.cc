// RunSelfTest: real buffers, real bindings, the real executor.

#include "reshard/selftest.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "exec/host_buffers.h"
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
  ASSIGN_OR_RETURN(internal::HostBuffers src,
                   internal::AllocateHostBuffers(source, "selftest-source"));
  ASSIGN_OR_RETURN(internal::HostBuffers dst,
                   internal::AllocateHostBuffers(target, "selftest-target"));
  ASSIGN_OR_RETURN(auto bound, TransferPlan::Bind(plan, source, src.bindings,
                                                  target, dst.bindings));
  report.plan_seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  // Tensor index in the source's sorted order.
  std::unordered_map<std::string_view, uint64_t> tensor_index;
  for (size_t i = 0; i < source.tensors().size(); ++i) {
    tensor_index.emplace(source.tensors()[i].tensor_id(), i);
  }
  auto progress = [&](std::string_view phase, uint64_t done, uint64_t total) {
    if (options.progress) {
      options.progress(phase, total == 0 ? 1.0 : double(done) / double(total));
    }
  };
  uint64_t source_total = 0;
  for (const auto* f : source.fragments()) source_total += f->nbytes();
  uint64_t done = 0;
  for (const auto* f : source.fragments()) {
    progress("fill", done, source_total);
    done += f->nbytes();
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
  // The generation and lease fence, right before the bytes move.
  RETURN_NOT_OK(bound.CheckCurrent(src.bindings, dst.bindings));
  progress("transfer", 0, 1);
  ASSIGN_OR_RETURN(TransferId id, transport->Submit(bound));
  RETURN_NOT_OK(transport->Wait(id));
  progress("transfer", 1, 1);
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report.bytes = bound.bytes();
  report.operations = bound.regions().size();
  report.segments = plan.summary().segments;
  // Verify every target byte.
  progress("fill", 1, 1);
  uint64_t target_total = 0;
  for (const auto* f : target.fragments()) target_total += f->nbytes();
  done = 0;
  for (const auto* f : target.fragments()) {
    progress("verify", done, target_total);
    done += f->nbytes();
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
  progress("verify", 1, 1);
  report.verified = report.mismatch.empty();
  if (options.measure_memcpy) {
    report.memcpy_gbps = internal::MeasureMemcpyGbps(
        std::min<uint64_t>(report.bytes, uint64_t{256} << 20), options.threads);
  }
  return report;
}

}  // namespace reshard
