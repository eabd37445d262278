// The tensor explorer's embedded data: per tensor its shape, dtype, bytes
// and regions, and its fragment boxes and regions as a "record" shared by
// every tensor with the same layout.
//
// A record is {"s": source fragments, "t": target fragments, "r":
// regions}, each a flat integer array: a fragment is (participant display
// position, offset..., shape...), a region (source fragment, target
// fragment) as indices into the record's own lists; its box is the
// intersection of the two. Tensors with equal records (layers on the same
// pipeline stage, gate and up projections) point at one copy.

#ifndef RESHARD_REPORT_EXPLORER_DATA_H_
#define RESHARD_REPORT_EXPLORER_DATA_H_

#include <cstdint>
#include <vector>

#include "report/report_model.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "util/canonical_json.h"

namespace reshard::internal {

// Writes the explorer object ({"dtypes", "omitted", "records", "tensors"})
// as the next value of `w`. `descriptors` is aligned with plan.tensors().
// Past `max_items` fragments plus regions in records, further tensors get
// record -1 and count in "omitted".
void WriteExplorerData(const LogicalTransferPlan& plan,
                       const ReportModel& model,
                       const std::vector<const TensorDescriptor*>& descriptors,
                       uint64_t max_items, CanonicalJsonWriter* w);

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_EXPLORER_DATA_H_
