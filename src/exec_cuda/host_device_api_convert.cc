// HostDeviceApi's FP8 and delta kernels (host_device_api.h): the
// arguments checked, then the kernels' __host__ __device__ functions
// (convert_kernels.h) run over the grid the GPU would run, phase by phase,
// block by block and thread by thread, when the stream's work runs.
#include <string>
#include <utility>

#include "exec_cuda/host_device_api.h"

namespace reshard::cuda {

namespace {

Status Invalid(const std::string& detail) {
  return host_emulation::Refuse("cudaErrorInvalidValue", detail);
}

std::string Num(uint64_t v) { return std::to_string(v); }

// a * b, or a refusal naming `what` when it overflows uint64.
Result<uint64_t> Product(uint64_t a, uint64_t b, const std::string& what) {
  uint64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p)) {
    return Invalid(what + " overflows uint64");
  }
  return p;
}

// The bytes a row-major matrix of `rows` x `cols` elements of
// `element_bytes`, rows `stride` elements apart, spans; refused for a
// stride below the row or an overflow.
Result<uint64_t> MatrixBytes(uint64_t rows, uint64_t cols, uint64_t stride,
                             uint64_t element_bytes, const std::string& name) {
  if (rows == 0 || cols == 0) return 0;
  if (stride < cols) {
    return Invalid(name + " row stride " + Num(stride) + " is below the " +
                   Num(cols) + " columns");
  }
  RESHARD_ASSIGN_OR_RETURN(
      uint64_t last, Product(rows - 1, stride, name + "'s last row offset"));
  if (__builtin_add_overflow(last, cols, &last)) {
    return Invalid(name + "'s end overflows uint64");
  }
  return Product(last, element_bytes, name + "'s bytes");
}

// Runs phases [0, phases) of a kernel, phase p over items(p) items, on the
// grid the launcher uses for it.
template <typename Items, typename Item>
void RunGrid(int phases, const Items& items, const Item& item) {
  for (int phase = 0; phase < phases; ++phase) {
    const uint64_t n = items(phase);
    const uint64_t blocks = ConvertBlocks(n);
    for (uint64_t block = 0; block < blocks; ++block) {
      for (uint32_t t = 0; t < kConvertThreads; ++t) {
        ConvertGridStride(n, block, blocks, t, kConvertThreads,
                          [&](uint64_t i) { item(phase, i); });
      }
    }
  }
}

Status CheckBlock(uint64_t block_rows, uint64_t block_cols) {
  if (block_rows == 0 || block_cols == 0) {
    return Invalid("block " + Num(block_rows) + " x " + Num(block_cols) +
                   " is empty");
  }
  return Status::OK();
}

}  // namespace

Status HostDeviceApi::CheckKernelRange(StreamHandle handle,
                                       const Stream& stream,
                                       const KernelRange& range,
                                       std::string_view kernel) {
  const std::string name(range.name);
  const uint64_t bytes = range.bytes;
  if (bytes == 0) return Status::OK();  // touches nothing
  if (range.ptr == nullptr) return Invalid(name + " is null");
  const auto ptr = reinterpret_cast<uintptr_t>(range.ptr);
  uintptr_t end = 0;
  if (__builtin_add_overflow(ptr, bytes, &end)) {
    return Invalid(name + " + " + Num(bytes) + " overflows the address space");
  }
  const Location at = Locate(range.ptr);
  if (at.device < 0) return Status::OK();
  const uint64_t left = at.bytes - (ptr - at.base);
  if (bytes > left) {
    return Invalid("the " + std::string(kernel) + " kernel reaches " +
                   Num(bytes) + " bytes past " + name +
                   ", beyond the end of its allocation on device " +
                   Num(static_cast<uint64_t>(at.device)) + " (" + Num(left) +
                   " bytes past " + name + ")");
  }
  return CheckPeer(handle, stream, at.device,
                   "runs the " + std::string(kernel) + " kernel on " + name);
}

Status HostDeviceApi::CheckKernelRanges(
    StreamHandle handle, const Stream& stream, std::string_view kernel,
    std::initializer_list<KernelRange> ranges) {
  for (const KernelRange& range : ranges) {
    RESHARD_RETURN_NOT_OK(CheckKernelRange(handle, stream, range, kernel));
  }
  return Status::OK();
}

template <typename Check>
Status HostDeviceApi::LaunchKernel(StreamHandle handle, const std::string& line,
                                   const Check& check) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<Stream*> stream = FindStream(handle);
  Status status = stream.ok() ? check(*stream) : stream.status();
  return Log(line, std::move(status));
}

Status HostDeviceApi::QueueKernel(Stream* stream, std::function<void()> work) {
  stream->work.push_back([this, work = std::move(work)] {
    work();
    ++counters_.kernels_run;
  });
  ++stream->queued;
  return Status::OK();
}

Status HostDeviceApi::LaunchCast(const CastArgs& a, StreamHandle handle) {
  return LaunchKernel(
      handle,
      "LaunchCast stream=" + Num(handle) + " elements=" + Num(a.elements),
      [&](Stream* stream) -> Status {
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t in,
            Product(a.elements, internal::ElementBytes(a.from), "src's bytes"));
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t out,
            Product(a.elements, internal::ElementBytes(a.to), "dst's bytes"));
        RESHARD_RETURN_NOT_OK(
            CheckKernelRanges(handle, *stream, "cast",
                              {{a.src, in, "src"}, {a.dst, out, "dst"}}));
        return QueueKernel(stream, [a] {
          RunGrid(
              1, [&](int) { return a.elements; },
              [&](int, uint64_t i) { CastItem(a, i); });
        });
      });
}

Status HostDeviceApi::LaunchQuantizeE4m3(const QuantizeArgs& a,
                                         StreamHandle handle) {
  return LaunchKernel(
      handle,
      "LaunchQuantizeE4m3 stream=" + Num(handle) + " rows=" + Num(a.rows) +
          " cols=" + Num(a.cols),
      [&](Stream* stream) -> Status {
        if (a.from == FloatType::kFloat8E4M3) {
          return Invalid(
              "the quantized source is float8_e4m3fn, not float32, "
              "bfloat16 or float16");
        }
        RESHARD_RETURN_NOT_OK(CheckBlock(a.block_rows, a.block_cols));
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t in, MatrixBytes(a.rows, a.cols, a.src_row_stride,
                                     internal::ElementBytes(a.from), "src"));
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t out,
            MatrixBytes(a.rows, a.cols, a.dst_row_stride, 1, "dst"));
        const uint64_t col_blocks = a.cols == 0 ? 0 : QuantizeColBlocks(a);
        RESHARD_ASSIGN_OR_RETURN(uint64_t scales,
                                 MatrixBytes(QuantizeRowBlocks(a), col_blocks,
                                             a.scale_row_stride, 4, "scales"));
        RESHARD_ASSIGN_OR_RETURN(uint64_t work,
                                 Product(a.rows, col_blocks, "the workspace"));
        RESHARD_ASSIGN_OR_RETURN(work,
                                 Product(work, 4, "the workspace's bytes"));
        RESHARD_RETURN_NOT_OK(
            CheckKernelRanges(handle, *stream, "quantize",
                              {{a.src, in, "src"},
                               {a.dst, out, "dst"},
                               {a.scales, scales, "scales"},
                               {a.workspace, work, "workspace"}}));
        return QueueKernel(stream, [a] {
          RunGrid(
              kQuantizePhases,
              [&](int phase) { return QuantizeItems(a, phase); },
              [&](int phase, uint64_t i) { QuantizeItem(a, phase, i); });
        });
      });
}

Status HostDeviceApi::LaunchDequantizeE4m3(const DequantizeArgs& a,
                                           StreamHandle handle) {
  return LaunchKernel(
      handle,
      "LaunchDequantizeE4m3 stream=" + Num(handle) + " rows=" + Num(a.rows) +
          " cols=" + Num(a.cols),
      [&](Stream* stream) -> Status {
        RESHARD_RETURN_NOT_OK(CheckBlock(a.block_rows, a.block_cols));
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t in,
            MatrixBytes(a.rows, a.cols, a.src_row_stride, 1, "src"));
        RESHARD_ASSIGN_OR_RETURN(
            uint64_t out, MatrixBytes(a.rows, a.cols, a.dst_row_stride,
                                      internal::ElementBytes(a.to), "dst"));
        const uint64_t row_blocks = (a.rows + a.block_rows - 1) / a.block_rows;
        const uint64_t col_blocks = (a.cols + a.block_cols - 1) / a.block_cols;
        RESHARD_ASSIGN_OR_RETURN(uint64_t scales,
                                 MatrixBytes(row_blocks, col_blocks,
                                             a.scale_row_stride, 4, "scales"));
        RESHARD_RETURN_NOT_OK(
            CheckKernelRanges(handle, *stream, "dequantize",
                              {{a.src, in, "src"},
                               {a.dst, out, "dst"},
                               {a.scales, scales, "scales"}}));
        return QueueKernel(stream, [a] {
          RunGrid(
              1, [&](int) { return a.rows * a.cols; },
              [&](int, uint64_t i) { DequantizeItem(a, i); });
        });
      });
}

namespace {

// The byte counts a delta launch touches: the region (now, base, dst), the
// map and the workspace (the values: value_bytes).
struct DeltaBytes {
  uint64_t region = 0, map = 0, work = 0;
};

Result<DeltaBytes> DeltaSizes(const DeltaArgs& a) {
  if (a.item == 0) return Invalid("item is 0 bytes");
  DeltaBytes b;
  RESHARD_ASSIGN_OR_RETURN(b.region,
                           Product(a.elements, a.item, "the region's bytes"));
  b.map = a.elements == 0 ? 0 : DeltaMapBytes(a);
  RESHARD_ASSIGN_OR_RETURN(
      b.work, Product(DeltaWorkspaceWords(a), 8, "the workspace's bytes"));
  return b;
}

// A delta launch's line in the log.
std::string DeltaLine(std::string_view call, const DeltaArgs& a,
                      StreamHandle handle) {
  return std::string(call) + " stream=" + Num(handle) +
         " elements=" + Num(a.elements) + " item=" + Num(a.item);
}

}  // namespace

Status HostDeviceApi::LaunchDeltaEncode(const DeltaArgs& a,
                                        StreamHandle handle) {
  return LaunchKernel(
      handle, DeltaLine("LaunchDeltaEncode", a, handle),
      [&](Stream* stream) -> Status {
        RESHARD_ASSIGN_OR_RETURN(DeltaBytes b, DeltaSizes(a));
        if (a.value_bytes < b.region) {
          return Invalid("value_bytes " + Num(a.value_bytes) +
                         " is below the region's " + Num(b.region) +
                         " bytes (every element may have changed)");
        }
        RESHARD_RETURN_NOT_OK(
            CheckKernelRanges(handle, *stream, "delta encode",
                              {{a.now, b.region, "now"},
                               {a.base, b.region, "base"},
                               {a.map, b.map, "map"},
                               {a.values, a.value_bytes, "values"},
                               {a.tile_counts, b.work, "tile_counts"}}));
        return QueueKernel(stream, [a] {
          RunGrid(
              kDeltaPhases, [&](int phase) { return DeltaItems(a, phase); },
              [&](int phase, uint64_t i) { DeltaEncodeItem(a, phase, i); });
        });
      });
}

Status HostDeviceApi::LaunchDeltaApply(const DeltaArgs& a,
                                       StreamHandle handle) {
  return LaunchKernel(
      handle, DeltaLine("LaunchDeltaApply", a, handle),
      [&](Stream* stream) -> Status {
        RESHARD_ASSIGN_OR_RETURN(DeltaBytes b, DeltaSizes(a));
        RESHARD_RETURN_NOT_OK(
            CheckKernelRanges(handle, *stream, "delta apply",
                              {{a.map, b.map, "map"},
                               {a.values, a.value_bytes, "values"},
                               {a.dst, b.region, "dst"},
                               {a.tile_counts, b.work, "tile_counts"}}));
        return QueueKernel(stream, [a] {
          RunGrid(
              kDeltaPhases, [&](int phase) { return DeltaItems(a, phase); },
              [&](int phase, uint64_t i) { DeltaApplyItem(a, phase, i); });
        });
      });
}

}  // namespace reshard::cuda
