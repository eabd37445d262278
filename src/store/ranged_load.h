// The one store-to-runtime loader: a stored manifest (object ranges) and a
// target placement -> plan -> bounded ranged reads straight into the bound
// target buffers. WeightStore::Load runs it on a committed revision with
// every delivered chunk verified against its checksum record; a Hugging
// Face checkpoint (src/hf/) runs it on read-only files without checksums.
//
// Per stored fragment, regions whose both sides are contiguous are read
// directly into the target (whole checksum chunks; the partial chunks at
// their edges through a one-chunk buffer), in groups of a few MiB that two
// threads claim in turn, each verifying its group right after reading it
// (both cores copy out of the page cache). A contiguous region whose
// source bytes another direct region of the same load already reads is
// copied from that region's target instead of read again (TP-replicated
// norms, DP replicas). Strided regions are served by one sequential sweep
// over the fragment's bytes in windows of `staged_window_bytes` (at most
// `staging_bytes / 2`): in each window the byte runs some region needs are
// read (runs closer than `max_read_gap_bytes` merged into one read). Where
// rows are long and each needed byte has one target, a window's reads
// scatter straight into the target rows (a backend reads ranges that
// continue each other with one readv or preadv); otherwise they land in
// staging and are copied out to every region with rows in them. Windows
// loaded into memory are taken in turn by two threads, each reading,
// verifying and copying out its own window in its own buffer (a 1 MiB
// window stays in the core's cache from read to copy); a sink's windows
// are read on one thread and copied out by a helper while the next is
// read. So no request is issued per row, every stored byte is read at
// most once per sweep, and the extra memory is bounded by `staging_bytes`
// (plus the windows' copy lists) whatever the model size.

#ifndef RESHARD_STORE_RANGED_LOAD_H_
#define RESHARD_STORE_RANGED_LOAD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"
#include "reshard/weight_store.h"
#include "store/checksum.h"

namespace reshard::internal {

struct RangedLoadOptions {
  // Largest single read, and byte runs per backend request (ranges that
  // continue each other count once).
  uint64_t max_range_bytes = uint64_t{64} << 20;
  uint32_t max_ranges_per_request = 1024;
  // The sweep's two windows together (bounded extra memory whatever the
  // model size).
  uint64_t staging_bytes = uint64_t{64} << 20;
  // A sweep window's size, at most staging_bytes / 2 (whole checksum
  // chunks). Windows of 256 KiB or more loaded into memory are read,
  // verified and copied out by two threads in turn; 1 MiB stays in a
  // core's cache between the read and the copy.
  uint64_t staged_window_bytes = uint64_t{1} << 20;
  // Needed runs of one window this close are read as one range (the gap
  // is read and dropped): fewer requests for small strided rows.
  uint64_t max_read_gap_bytes = uint64_t{64} << 10;
  // A window whose rows average at least this many bytes (and whose
  // needed bytes each go to one target) is read straight into the target
  // rows, verified there, with no staging copy. 0: always when possible;
  // UINT64_MAX: never.
  uint64_t min_scatter_bytes = uint64_t{4} << 10;
  // The checksums of a stored fragment's object. Empty: the source has
  // none (a checkpoint file), reads are exact byte ranges and nothing is
  // verified.
  std::function<Result<ChunkSums>(const StoredFragment&)> chunk_sums;
  // Target bytes delivered of the load's, after each stored fragment
  // (through a ProgressMeter); empty: none.
  ProgressCallback progress;
};

// Plans `target` (only the fragments `target_bindings` bind) from
// `manifest` and fills the bound host buffers from `backend`. Checks every
// target (host memory, no two loaded views at one physical address) before
// the first read. On error the targets are not loaded (contents
// unspecified).
Result<LoadReport> RangedLoad(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const RangedLoadOptions& options);

// Where a load's bytes go when the target is not memory of this process
// (a checkpoint file being written): Write(position, data, n) once per run
// that is contiguous on both sides, `data` valid for the call only.
class RangedSink {
 public:
  virtual ~RangedSink() = default;
  virtual Status Write(uint64_t position, const uint8_t* data, uint64_t n) = 0;
};

// Serves `plan` (made by LogicalTransferPlan::MakeFromStored from
// `manifest`) into `sink`: region r's target side starts at position
// target_position(r). Every region goes through the staging sweep, so the
// memory used is the staging window whatever the fragment sizes.
Result<LoadReport> RangedLoadToSink(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const LogicalTransferPlan& plan,
    const std::function<uint64_t(const TransferRegion&)>& target_position,
    RangedSink& sink, const RangedLoadOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_RANGED_LOAD_H_
