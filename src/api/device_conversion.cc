#include "api/device_conversion.h"

#include <algorithm>
#include <string>

#include "util/float_convert.h"

namespace reshard::internal {

using cuda::CopyKind;
using cuda::StreamHandle;

// One converting target fragment, its part, and the device it is on.
struct DeviceConverter::Job {
  const WeightPlacementPart* part;
  const PlacementFragment* fragment;
  const TensorConversion* conversion;
  void* target;
  int device;
};

DeviceConverter::~DeviceConverter() {
  // Queued work ends before its memory is freed.
  (void)streams_.SynchronizeAll();
  for (void* p : owned_) (void)api_->Free(p);
}

Result<void*> DeviceConverter::Allocate(int device, size_t bytes) {
  RESHARD_ASSIGN_OR_RETURN(void* p, api_->Malloc(device, bytes));
  if (p != nullptr) owned_.push_back(p);
  return p;
}

Result<StreamHandle> DeviceConverter::StreamOf(int device) {
  return streams_.Of(device);
}

Status DeviceConverter::Quantize(const Job& job, const void* src,
                                 const FragmentMemory& target_of) {
  const PlacementFragment& f = *job.fragment;
  const TensorConversion& c = *job.conversion;
  const Dims& n = f.local_shape();
  cuda::QuantizeArgs a;
  a.src = src;
  a.from = *FloatTypeOf(c.source_dtype);
  a.rows = static_cast<uint64_t>(n[0]);
  a.cols = static_cast<uint64_t>(n[1]);
  a.src_row_stride = a.dst_row_stride = a.cols;
  a.block_rows = static_cast<uint64_t>(c.block.rows);
  a.block_cols = static_cast<uint64_t>(c.block.cols);
  a.dst = static_cast<uint8_t*>(job.target);
  const Dims first = {f.global_offset()[0] / c.block.rows,
                      f.global_offset()[1] / c.block.cols};
  const Dims count = {static_cast<int64_t>(cuda::QuantizeRowBlocks(a)),
                      static_cast<int64_t>(cuda::QuantizeColBlocks(a))};
  a.scale_row_stride = static_cast<uint64_t>(count[1]);
  RESHARD_ASSIGN_OR_RETURN(
      void* scales,
      Allocate(job.device, static_cast<size_t>(count[0] * count[1]) * 4));
  RESHARD_ASSIGN_OR_RETURN(
      void* workspace,
      Allocate(job.device, cuda::QuantizeWorkspaceWords(a) * 4));
  a.scales = static_cast<float*>(scales);
  a.workspace = static_cast<uint32_t*>(workspace);
  RESHARD_ASSIGN_OR_RETURN(StreamHandle stream, StreamOf(job.device));
  RESHARD_RETURN_NOT_OK(api_->LaunchQuantizeE4m3(a, stream));
  // The block box's scales into every scale fragment of the participant
  // inside it (as ScatterScales on the host), after the kernel on the
  // same stream.
  return ForEachScaleFragmentIn(
      *job.part, c.scale_tensor_id, first, count, target_of,
      [&](const PlacementFragment& s, void* out, int64_t scale_at) {
        const Dims& m = s.local_shape();
        return api_->Copy2DAsync(
            out, static_cast<size_t>(m[1]) * 4, a.scales + scale_at,
            static_cast<size_t>(count[1]) * 4, static_cast<size_t>(m[1]) * 4,
            static_cast<size_t>(m[0]), CopyKind::kDefault, stream);
      });
}

Status DeviceConverter::Dequantize(const ConversionPlan& plan, const Job& job,
                                   const std::string& staged_id,
                                   const void* src,
                                   const FragmentMemory& staging_of) {
  const PlacementFragment& f = *job.fragment;
  const TensorConversion& c = *job.conversion;
  RESHARD_ASSIGN_OR_RETURN(const StagedScales staged_scales,
                           StagedScalesOf(plan, staged_id, f, staging_of));
  const PlacementFragment* scale_box = staged_scales.box;
  RESHARD_ASSIGN_OR_RETURN(StreamHandle stream, StreamOf(job.device));
  const Dims& scale_shape = scale_box->local_shape();
  const auto* scales = static_cast<const float*>(staged_scales.data);
  const FloatType scale_type = *FloatTypeOf(c.scale_dtype);
  if (scale_type != FloatType::kFloat32) {
    // 16-bit scales widen exactly to float32 first.
    const uint64_t count =
        static_cast<uint64_t>(scale_shape[0] * scale_shape[1]);
    RESHARD_ASSIGN_OR_RETURN(void* wide, Allocate(job.device, count * 4));
    RESHARD_RETURN_NOT_OK(api_->LaunchCast(
        {staged_scales.data, scale_type, wide, FloatType::kFloat32, count},
        stream));
    scales = static_cast<const float*>(wide);
  }
  const Dims& n = f.local_shape();
  const FloatType to = *FloatTypeOf(c.target_dtype);
  for (const DequantizeRegion& r :
       DequantizeRegions(f.global_offset(), n, c.block,
                         scale_box->global_offset(), scale_shape[1])) {
    cuda::DequantizeArgs a;
    a.src = static_cast<const uint8_t*>(src) + r.at;
    a.rows = static_cast<uint64_t>(r.rows);
    a.cols = static_cast<uint64_t>(r.cols);
    a.src_row_stride = a.dst_row_stride = static_cast<uint64_t>(n[1]);
    a.block_rows = static_cast<uint64_t>(r.block_rows);
    a.block_cols = static_cast<uint64_t>(r.block_cols);
    a.scales = scales + r.scale_at;
    a.scale_row_stride = static_cast<uint64_t>(scale_shape[1]);
    a.to = to;
    a.dst =
        static_cast<char*>(job.target) + static_cast<size_t>(r.at) * SizeOf(to);
    RESHARD_RETURN_NOT_OK(api_->LaunchDequantizeE4m3(a, stream));
  }
  return Status::OK();
}

Status DeviceConverter::Run(const ConversionPlan& plan, const Job& job,
                            const FragmentMemory& staging_of,
                            const FragmentMemory& target_of) {
  const PlacementFragment& f = *job.fragment;
  const TensorConversion& c = *job.conversion;
  RESHARD_ASSIGN_OR_RETURN(const StagedSource staged,
                           StagedSourceOf(plan, f, staging_of));
  const void* src = staged.data;
  if (c.kind == ConversionKind::kCast) {
    uint64_t elements = 1;
    for (int64_t e : f.local_shape()) elements *= static_cast<uint64_t>(e);
    RESHARD_ASSIGN_OR_RETURN(StreamHandle stream, StreamOf(job.device));
    return api_->LaunchCast({src, *FloatTypeOf(c.source_dtype), job.target,
                             *FloatTypeOf(c.target_dtype), elements},
                            stream);
  }
  if (c.kind == ConversionKind::kQuantize) {
    return Quantize(job, src, target_of);
  }
  return Dequantize(plan, job, *staged.id, src, staging_of);
}

Status DeviceConverter::Apply(const ConversionPlan& plan,
                              const FragmentMemory& staging_of,
                              const FragmentMemory& target_of) {
  Status first_error;
  for (const WeightPlacementPart& part : plan.target().parts()) {
    for (const PlacementFragment& f : part.fragments()) {
      const TensorConversion* c = plan.Find(f.tensor_id());
      void* target =
          c == nullptr ? nullptr : target_of(f.placement_fragment_id());
      if (target == nullptr) continue;
      RESHARD_ASSIGN_OR_RETURN(cuda::PointerInfo info, api_->Pointer(target));
      first_error =
          Run(plan, {&part, &f, c, target, info.device}, staging_of, target_of);
      if (!first_error.ok()) break;
    }
    if (!first_error.ok()) break;
  }
  // What was queued may still run: wait for it before returning.
  return streams_.SynchronizeAll(std::move(first_error));
}

}  // namespace reshard::internal
