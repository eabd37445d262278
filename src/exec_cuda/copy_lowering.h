// How the CUDA executor moves one bound region: as one or a few pitched
// copies (cudaMemcpy2DAsync / 3DAsync), or, where no copy descriptor
// expresses the region's strides within the limits, as one launch of the
// gather/scatter kernel. The same row geometry as the CPU executor: rows
// of `inner_bytes`, the region's outer loops (outermost first) on each
// side with its own strides.
#ifndef RESHARD_EXEC_CUDA_COPY_LOWERING_H_
#define RESHARD_EXEC_CUDA_COPY_LOWERING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "exec_cuda/device_api.h"
#include "exec_cuda/gather_scatter.h"
#include "reshard/bound_plan.h"
#include "reshard/status.h"

namespace reshard::cuda {

struct LoweringLimits {
  size_t max_pitch = 2147483647;  // DeviceApi::MaxPitch
  uint32_t max_copies = 64;       // per region, else the kernel
  // Whether the kernel may run (both sides are memory a device reads and
  // writes). Without it a region no few copies express is moved as one
  // copy per row, however many.
  bool kernel_allowed = true;
};

struct RegionWork {
  // Pitched copies, their `kind` left kDefault for the executor to set;
  // those of depth 1 are 2D copies.
  std::vector<Copy3D> copies;
  std::optional<GatherScatterArgs> kernel;
};

// The loops of `region` with the ones that change nothing folded away:
// loops of one iteration dropped, an innermost loop contiguous on both
// sides folded into the rows (`inner_bytes` grows), and a loop folded into
// the next inner one where it steps over exactly that loop's extent on
// both sides. The same bytes, fewer and longer rows.
struct FoldedLoops {
  uint64_t inner_bytes = 0;
  std::vector<OuterLoop> loops;  // outermost first
};
FoldedLoops FoldLoops(const BoundRegion& region);

// The copies or the kernel that move `region` (InvalidArgument naming the
// region for one with more loops than the kernel takes, after folding).
Result<RegionWork> LowerRegion(const BoundRegion& region,
                               const LoweringLimits& limits);

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_COPY_LOWERING_H_
