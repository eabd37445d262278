#include "bind/apply_conversion.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/float_convert.h"

namespace reshard::internal {
namespace {

// One converting target fragment and the part it belongs to.
struct Job {
  const WeightPlacementPart* part;
  const PlacementFragment* fragment;
  const TensorConversion* conversion;
  void* target;
};

// Copies the scales of the block box (first, count) a weight fragment
// computed into every scale fragment of its participant inside that box.
Status ScatterScales(const Job& job, const std::vector<float>& scales,
                     const Dims& first, const Dims& count,
                     const FragmentMemory& target_of) {
  return ForEachScaleFragmentIn(
      *job.part, job.conversion->scale_tensor_id, first, count, target_of,
      [&](const PlacementFragment& s, void* out, int64_t scale_at) {
        const Dims& n = s.local_shape();
        for (int64_t r = 0; r < n[0]; ++r) {
          std::memcpy(static_cast<float*>(out) + r * n[1],
                      scales.data() + scale_at + r * count[1],
                      static_cast<size_t>(n[1]) * 4);
        }
        return Status::OK();
      });
}

// Dequantizes the row-major weight box at global `offset` of shape `n`
// (`src` FP8, `dst` of type `to`, both n[1] elements a row), region by
// region (DequantizeRegions), each with the scales of its blocks. `scales`
// is the row-major scale box at global block `scale_offset`, `scale_cols`
// wide, covering every block the weight box overlaps.
void DequantizeBox(const uint8_t* src, const Dims& offset, const Dims& n,
                   const Fp8Block& block, const float* scales,
                   const Dims& scale_offset, int64_t scale_cols, FloatType to,
                   void* dst) {
  for (const DequantizeRegion& r :
       DequantizeRegions(offset, n, block, scale_offset, scale_cols)) {
    DequantizeE4m3Blocks(
        src + r.at, MatrixView{r.rows, r.cols, n[1]}, r.block_rows,
        r.block_cols, scales + r.scale_at, scale_cols, to,
        static_cast<char*>(dst) + static_cast<size_t>(r.at) * SizeOf(to), n[1]);
  }
}

Status RunJob(const ConversionPlan& plan, const Job& job,
              const FragmentMemory& staging_of,
              const FragmentMemory& target_of) {
  const PlacementFragment& f = *job.fragment;
  const TensorConversion& c = *job.conversion;
  RESHARD_ASSIGN_OR_RETURN(const StagedSource staged,
                           StagedSourceOf(plan, f, staging_of));
  const void* src = staged.data;
  const FloatType from = *FloatTypeOf(c.source_dtype);
  const FloatType to = *FloatTypeOf(c.target_dtype);
  const Dims& n = f.local_shape();
  if (c.kind == ConversionKind::kCast) {
    uint64_t elements = 1;
    for (int64_t e : n) elements *= static_cast<uint64_t>(e);
    CastElements(from, src, to, job.target, elements);
    return Status::OK();
  }
  const MatrixView shape{n[0], n[1], n[1]};
  const Dims first = {f.global_offset()[0] / c.block.rows,
                      f.global_offset()[1] / c.block.cols};
  const Dims count = {(n[0] + c.block.rows - 1) / c.block.rows,
                      (n[1] + c.block.cols - 1) / c.block.cols};
  if (c.kind == ConversionKind::kQuantize) {
    std::vector<float> scales(static_cast<size_t>(count[0] * count[1]));
    QuantizeE4m3Blocks(from, src, shape, c.block.rows, c.block.cols,
                       static_cast<uint8_t*>(job.target), n[1], scales.data(),
                       count[1]);
    return ScatterScales(job, scales, first, count, target_of);
  }
  // The staged scales: the blocks of this fragment, or (where the target's
  // fragments split blocks) the whole scale tensor.
  RESHARD_ASSIGN_OR_RETURN(const StagedScales staged_scales,
                           StagedScalesOf(plan, *staged.id, f, staging_of));
  const PlacementFragment* scale_box = staged_scales.box;
  const Dims& scale_shape = scale_box->local_shape();
  // 16-bit scales widen exactly to float32 first.
  std::vector<float> widened;
  const auto* scales = static_cast<const float*>(staged_scales.data);
  const FloatType scale_type = *FloatTypeOf(c.scale_dtype);
  if (scale_type != FloatType::kFloat32) {
    widened.resize(static_cast<size_t>(scale_shape[0] * scale_shape[1]));
    CastElements(scale_type, staged_scales.data, FloatType::kFloat32,
                 widened.data(), widened.size());
    scales = widened.data();
  }
  DequantizeBox(static_cast<const uint8_t*>(src), f.global_offset(), n, c.block,
                scales, scale_box->global_offset(), scale_shape[1], to,
                job.target);
  return Status::OK();
}

std::vector<Job> CollectJobs(const ConversionPlan& plan,
                             const FragmentMemory& target_of) {
  std::vector<Job> jobs;
  for (const WeightPlacementPart& part : plan.target().parts()) {
    for (const PlacementFragment& f : part.fragments()) {
      const TensorConversion* c = plan.Find(f.tensor_id());
      if (c == nullptr) continue;
      void* target = target_of(f.placement_fragment_id());
      if (target != nullptr) jobs.push_back({&part, &f, c, target});
    }
  }
  return jobs;
}

}  // namespace

FragmentMemory FragmentMemoryIn(
    const std::unordered_map<std::string, void*>& map) {
  return [&map](std::string_view id) -> void* {
    auto it = map.find(std::string(id));
    return it == map.end() ? nullptr : it->second;
  };
}

Result<StagedSource> StagedSourceOf(const ConversionPlan& plan,
                                    const PlacementFragment& f,
                                    const FragmentMemory& staging_of) {
  const std::string& id = plan.StagingFragmentOf(f.placement_fragment_id());
  const void* data = staging_of(id);
  if (data == nullptr) {
    return Status::InvalidArgument("no staging buffer for fragment " +
                                   f.placement_fragment_id() + " of " +
                                   f.tensor_id());
  }
  return StagedSource{&id, data};
}

Result<StagedScales> StagedScalesOf(const ConversionPlan& plan,
                                    const std::string& staged_id,
                                    const PlacementFragment& f,
                                    const FragmentMemory& staging_of) {
  const std::string& scale_id = plan.StagingScaleOf(staged_id);
  const void* data = staging_of(scale_id);
  const PlacementFragment* box = plan.staging().FindFragment(scale_id);
  if (data == nullptr || box == nullptr) {
    return Status::InvalidArgument("no staging buffer for the scales of " +
                                   f.tensor_id() + " fragment " +
                                   f.placement_fragment_id());
  }
  return StagedScales{data, box};
}

std::vector<DequantizeRegion> DequantizeRegions(const Dims& offset,
                                                const Dims& n,
                                                const Fp8Block& block,
                                                const Dims& scale_offset,
                                                int64_t scale_cols) {
  const int64_t bn = block.rows, bk = block.cols;
  const int64_t head_rows = std::min(n[0], (bn - offset[0] % bn) % bn);
  const int64_t head_cols = std::min(n[1], (bk - offset[1] % bk) % bk);
  // (first local row or column, count, block extent of the region)
  const int64_t rows[2][3] = {{0, head_rows, head_rows},
                              {head_rows, n[0] - head_rows, bn}};
  const int64_t cols[2][3] = {{0, head_cols, head_cols},
                              {head_cols, n[1] - head_cols, bk}};
  std::vector<DequantizeRegion> regions;
  for (const auto& r : rows) {
    if (r[1] == 0) continue;
    for (const auto& c : cols) {
      if (c[1] == 0) continue;
      const int64_t block_row = (offset[0] + r[0]) / bn - scale_offset[0];
      const int64_t block_col = (offset[1] + c[0]) / bk - scale_offset[1];
      regions.push_back({r[0] * n[1] + c[0], r[1], c[1], r[2], c[2],
                         block_row * scale_cols + block_col});
    }
  }
  return regions;
}

Status ForEachScaleFragmentIn(const WeightPlacementPart& part,
                              const std::string& scale_tensor_id,
                              const Dims& first, const Dims& count,
                              const FragmentMemory& target_of,
                              const ScaleCopy& copy) {
  for (const PlacementFragment& s : part.fragments()) {
    if (s.tensor_id() != scale_tensor_id) continue;
    const Dims& o = s.global_offset();
    const Dims& n = s.local_shape();
    if (o[0] < first[0] || o[1] < first[1] ||
        o[0] + n[0] > first[0] + count[0] ||
        o[1] + n[1] > first[1] + count[1]) {
      continue;
    }
    void* out = target_of(s.placement_fragment_id());
    if (out == nullptr) {
      return Status::InvalidArgument("no target buffer for scale fragment " +
                                     s.placement_fragment_id() + " of " +
                                     s.tensor_id());
    }
    RESHARD_RETURN_NOT_OK(
        copy(s, out, (o[0] - first[0]) * count[1] + (o[1] - first[1])));
  }
  return Status::OK();
}

Status ApplyConversions(const ConversionPlan& plan,
                        const FragmentMemory& staging_of,
                        const FragmentMemory& target_of, uint32_t threads) {
  const std::vector<Job> jobs = CollectJobs(plan, target_of);
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      Status st = RunJob(plan, jobs[i], staging_of, target_of);
      if (st.ok()) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = std::move(st);
      next = jobs.size();
    }
  };
  const size_t n =
      std::clamp<size_t>(threads, 1, std::max<size_t>(1, jobs.size()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return first_error;
}

}  // namespace reshard::internal
