// Test helper for the FP8 and delta kernels (exec_cuda/convert_kernels.h):
// each runs one kernel through a DeviceApi (the CUDA runtime's or the host
// emulation's) on device memory of device 0 — inputs copied there, the
// launch, outputs copied back — and returns what the kernel wrote, for
// comparison with the CPU functions (util/float_convert.h,
// live/delta_codec.h). Device memory starts as 0xDB garbage, so outputs
// that a kernel failed to write show.
#ifndef RESHARD_TESTING_CONVERT_KERNEL_RUNS_H_
#define RESHARD_TESTING_CONVERT_KERNEL_RUNS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "exec_cuda/device_api.h"
#include "reshard/status.h"

namespace reshard::testing {

// Device memory of one run, freed at the end; a stream of device 0.
class KernelRun {
 public:
  explicit KernelRun(cuda::DeviceApi& api) : api_(api) {}
  ~KernelRun() {
    for (void* p : memory_) (void)api_.Free(p);
    if (stream_ != 0) (void)api_.DestroyStream(stream_);
  }
  KernelRun(const KernelRun&) = delete;
  KernelRun& operator=(const KernelRun&) = delete;

  Result<cuda::StreamHandle> Stream() {
    if (stream_ == 0) {
      RESHARD_ASSIGN_OR_RETURN(stream_, api_.CreateStream(0));
    }
    return stream_;
  }
  // `bytes` of device memory (at least one byte, so never null), filled
  // with `fill` when given.
  template <typename T>
  Result<T*> Alloc(size_t bytes, const void* fill = nullptr) {
    RESHARD_ASSIGN_OR_RETURN(void* p, api_.Malloc(0, bytes == 0 ? 1 : bytes));
    memory_.push_back(p);
    if (fill != nullptr && bytes > 0) {
      RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, Stream());
      RESHARD_RETURN_NOT_OK(api_.Copy2DAsync(p, bytes, fill, bytes, bytes, 1,
                                             cuda::CopyKind::kHostToDevice, s));
    }
    return static_cast<T*>(p);
  }
  // Waits for the stream, then copies `bytes` at `device` back.
  template <typename T>
  Result<std::vector<T>> Read(const void* device, size_t bytes) {
    std::vector<T> out((bytes + sizeof(T) - 1) / sizeof(T));
    RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, Stream());
    if (bytes > 0) {
      RESHARD_RETURN_NOT_OK(api_.Copy2DAsync(out.data(), bytes, device, bytes,
                                             bytes, 1,
                                             cuda::CopyKind::kDeviceToHost, s));
    }
    RESHARD_RETURN_NOT_OK(api_.SynchronizeStream(s));
    return out;
  }

 private:
  cuda::DeviceApi& api_;
  cuda::StreamHandle stream_ = 0;
  std::vector<void*> memory_;
};

// CastElements on the device: `elements` elements of `from` at `src`.
inline Result<std::vector<uint8_t>> RunCast(cuda::DeviceApi& api,
                                            cuda::FloatType from,
                                            cuda::FloatType to, const void* src,
                                            uint64_t elements) {
  KernelRun run(api);
  cuda::CastArgs a;
  a.from = from;
  a.to = to;
  a.elements = elements;
  const size_t out = elements * ::reshard::internal::ElementBytes(to);
  RESHARD_ASSIGN_OR_RETURN(
      a.src,
      run.Alloc<void>(elements * ::reshard::internal::ElementBytes(from), src));
  RESHARD_ASSIGN_OR_RETURN(a.dst, run.Alloc<void>(out));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, run.Stream());
  RESHARD_RETURN_NOT_OK(api.LaunchCast(a, s));
  return run.Read<uint8_t>(a.dst, out);
}

struct QuantizedOnDevice {
  std::vector<uint8_t> codes;  // rows x cols, contiguous
  std::vector<float> scales;   // row blocks x col blocks, contiguous
};

// QuantizeE4m3Blocks on the device: a contiguous `rows` x `cols` matrix of
// `from` at `src`.
inline Result<QuantizedOnDevice> RunQuantize(cuda::DeviceApi& api,
                                             cuda::FloatType from,
                                             const void* src, uint64_t rows,
                                             uint64_t cols, uint64_t block_rows,
                                             uint64_t block_cols) {
  KernelRun run(api);
  cuda::QuantizeArgs a;
  a.from = from;
  a.rows = rows;
  a.cols = cols;
  a.src_row_stride = a.dst_row_stride = cols;
  a.block_rows = block_rows;
  a.block_cols = block_cols;
  a.scale_row_stride = cuda::QuantizeColBlocks(a);
  const uint64_t scales = cuda::QuantizeRowBlocks(a) * a.scale_row_stride;
  RESHARD_ASSIGN_OR_RETURN(
      a.src, run.Alloc<void>(
                 rows * cols * ::reshard::internal::ElementBytes(from), src));
  RESHARD_ASSIGN_OR_RETURN(a.dst, run.Alloc<uint8_t>(rows * cols));
  RESHARD_ASSIGN_OR_RETURN(a.scales, run.Alloc<float>(scales * 4));
  RESHARD_ASSIGN_OR_RETURN(
      a.workspace, run.Alloc<uint32_t>(cuda::QuantizeWorkspaceWords(a) * 4));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, run.Stream());
  RESHARD_RETURN_NOT_OK(api.LaunchQuantizeE4m3(a, s));
  QuantizedOnDevice q;
  RESHARD_ASSIGN_OR_RETURN(q.codes, run.Read<uint8_t>(a.dst, rows * cols));
  RESHARD_ASSIGN_OR_RETURN(q.scales, run.Read<float>(a.scales, scales * 4));
  return q;
}

// DequantizeE4m3Blocks on the device: contiguous codes and scales.
inline Result<std::vector<uint8_t>> RunDequantize(
    cuda::DeviceApi& api, const std::vector<uint8_t>& codes,
    const std::vector<float>& scales, uint64_t rows, uint64_t cols,
    uint64_t block_rows, uint64_t block_cols, cuda::FloatType to) {
  KernelRun run(api);
  cuda::DequantizeArgs a;
  a.rows = rows;
  a.cols = cols;
  a.src_row_stride = a.dst_row_stride = cols;
  a.block_rows = block_rows;
  a.block_cols = block_cols;
  a.scale_row_stride = (cols + block_cols - 1) / block_cols;
  a.to = to;
  const size_t out = rows * cols * ::reshard::internal::ElementBytes(to);
  RESHARD_ASSIGN_OR_RETURN(a.src,
                           run.Alloc<uint8_t>(codes.size(), codes.data()));
  RESHARD_ASSIGN_OR_RETURN(a.scales,
                           run.Alloc<float>(scales.size() * 4, scales.data()));
  RESHARD_ASSIGN_OR_RETURN(a.dst, run.Alloc<void>(out));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, run.Stream());
  RESHARD_RETURN_NOT_OK(api.LaunchDequantizeE4m3(a, s));
  return run.Read<uint8_t>(a.dst, out);
}

struct DeltaOnDevice {
  std::vector<uint8_t> map, values, base;  // values: the changed ones
  uint64_t changed = 0;
};

// The delta encode kernel: `now` against `base` (the same size, elements
// of `item` bytes).
inline Result<DeltaOnDevice> RunDeltaEncode(cuda::DeviceApi& api,
                                            const std::vector<uint8_t>& now,
                                            const std::vector<uint8_t>& base,
                                            uint32_t item) {
  KernelRun run(api);
  cuda::DeltaArgs a;
  a.item = item;
  a.elements = now.size() / item;
  a.value_bytes = now.size();
  const uint64_t map = cuda::DeltaMapBytes(a);
  RESHARD_ASSIGN_OR_RETURN(a.now, run.Alloc<uint8_t>(now.size(), now.data()));
  RESHARD_ASSIGN_OR_RETURN(a.base,
                           run.Alloc<uint8_t>(base.size(), base.data()));
  RESHARD_ASSIGN_OR_RETURN(a.map, run.Alloc<uint8_t>(map));
  RESHARD_ASSIGN_OR_RETURN(a.values, run.Alloc<uint8_t>(now.size()));
  const uint64_t words = cuda::DeltaWorkspaceWords(a);
  RESHARD_ASSIGN_OR_RETURN(a.tile_counts, run.Alloc<uint64_t>(words * 8));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, run.Stream());
  RESHARD_RETURN_NOT_OK(api.LaunchDeltaEncode(a, s));
  DeltaOnDevice d;
  RESHARD_ASSIGN_OR_RETURN(std::vector<uint64_t> counts,
                           run.Read<uint64_t>(a.tile_counts, words * 8));
  d.changed = counts.back();
  RESHARD_ASSIGN_OR_RETURN(d.map, run.Read<uint8_t>(a.map, map));
  RESHARD_ASSIGN_OR_RETURN(d.values,
                           run.Read<uint8_t>(a.values, d.changed * item));
  RESHARD_ASSIGN_OR_RETURN(d.base, run.Read<uint8_t>(a.base, base.size()));
  return d;
}

// The delta apply kernel: `values` into `dst` as `map` says.
inline Result<std::vector<uint8_t>> RunDeltaApply(
    cuda::DeviceApi& api, const std::vector<uint8_t>& map,
    const std::vector<uint8_t>& values, const std::vector<uint8_t>& dst,
    uint32_t item) {
  KernelRun run(api);
  cuda::DeltaArgs a;
  a.item = item;
  a.elements = dst.size() / item;
  a.value_bytes = values.size();
  RESHARD_ASSIGN_OR_RETURN(a.map, run.Alloc<uint8_t>(map.size(), map.data()));
  RESHARD_ASSIGN_OR_RETURN(a.values,
                           run.Alloc<uint8_t>(values.size(), values.data()));
  RESHARD_ASSIGN_OR_RETURN(a.dst, run.Alloc<uint8_t>(dst.size(), dst.data()));
  RESHARD_ASSIGN_OR_RETURN(
      a.tile_counts, run.Alloc<uint64_t>(cuda::DeltaWorkspaceWords(a) * 8));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle s, run.Stream());
  RESHARD_RETURN_NOT_OK(api.LaunchDeltaApply(a, s));
  return run.Read<uint8_t>(a.dst, dst.size());
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_CONVERT_KERNEL_RUNS_H_
