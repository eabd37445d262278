// Loader: serves the regions of one stored object (one stored fragment)
// into their targets, as RangedLoad plans them (see ranged_load.h for the
// read strategy): contiguous regions read straight into their targets,
// strided ones swept in windows.

#ifndef RESHARD_STORE_OBJECT_LOADER_H_
#define RESHARD_STORE_OBJECT_LOADER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind/strided_stream.h"
#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"
#include "store/checksum.h"
#include "store/ranged_load.h"

namespace reshard::internal::object_load {

// One region to serve from its stored fragment: object offset of its first
// row, its source side (offsets relative to that) and its target side.
struct Work {
  uint64_t object_base = 0;
  StridedSide source;  // base == nullptr: offsets only
  StridedSide target;  // base == nullptr: offsets from target_base
  // The target's first byte: a memory address, or a RangedSink position.
  uint64_t target_base = 0;
  uint64_t rows = 0;
  // Sweep cursor: next row and byte within it.
  uint64_t row = 0;
  uint64_t within = 0;
  uint64_t NextOffset() const {
    return object_base + RowOffset(source, row) + within;
  }
  uint64_t end() const { return object_base + source.total_bytes; }
};

// Byte range [begin, end) of an object.
using ByteRun = std::pair<uint64_t, uint64_t>;

// One copy out of a sweep window: n bytes at window offset `from` to
// target position `to`.
struct Piece {
  uint64_t to = 0;
  uint64_t from = 0;
  uint64_t n = 0;
};

// Where a sweep window's bytes were read: reads[i] (object bytes) is
// ranges[ends[i - 1] .. ends[i]) in order.
struct WindowRead {
  std::vector<ByteRun> reads;
  std::vector<ReadRange> ranges;
  std::vector<size_t> ends;
};

// Serves the regions of one stored object after another (Run), reusing its
// chunk buffer and staging between them; counts into the load's report.
class Loader {
 public:
  Loader(ObjectStore& backend, const RangedLoadOptions& options,
         LoadReport* report, RangedSink* sink)
      : b_(backend), o_(options), report_(report), sink_(sink) {}

  // `sums` describes the object (chunk_bytes 1 and no sums when
  // `verified` is false; its size is then the fragment's end).
  Status Run(const StoredFragment& fragment, const ChunkSums& sums,
             bool verified, std::vector<Work>& direct,
             std::vector<Work>& staged);

  // The staging memory allocated so far.
  uint64_t staging_bytes() const {
    return chunk_buf_.size() + staging_[0].size() + staging_[1].size();
  }

 private:
  // Contiguous regions in object order: each is read unless an earlier
  // one read a source range containing it; those are copied from that
  // region's target after the reads.
  Status DirectAll(std::vector<Work>& direct);

  // A contiguous region: whole chunks straight into the target, edges via
  // the chunk buffer.
  Status Direct(const Work& w);

  // Object bytes [begin, end) within one chunk, through the chunk buffer.
  Status Edge(uint64_t begin, uint64_t end, uint8_t* dest);

  // Queues a direct read; the queue is read once it holds
  // max_ranges_per_request runs and `r` would start another.
  Status AddPending(ReadRange r);

  // Reads the pending direct ranges in groups of at least kPipelineBytes.
  // Two workers claim the groups in turn, each reading a group and then
  // verifying it while its bytes are still in the core's cache: both cores
  // copy out of the page cache (a single reader is bound by one core's copy
  // speed on warm files), and a slow read holds up only its own worker.
  // The error reported is the first in object order.
  Status Flush();

  Status Verify(uint64_t offset, const uint8_t* data, uint64_t n);

  // Reads `ranges`, counting them in `stats` (the report, or the sweep
  // helper's own counts).
  Status Read(const std::vector<ReadRange>& ranges, LoadReport* stats);

  // Strided regions: windows in object order; in each, the runs the
  // regions need are read once (chunk-aligned when verified), verified and
  // delivered. Where every needed byte of a window goes to one target in
  // rows of at least `min_scatter_bytes`, the window is read straight into
  // the target rows (the bytes no region needs into staging) and verified
  // there; otherwise it is read into staging and copied out.
  //
  // Windows of at least kTwoWorkerBytes (loads into memory, more than one
  // window) are shared by this thread and a helper, each reading, verifying and
  // copying out its own window in its own buffer: a window small enough to stay
  // in a core's cache is copied out at cache speed, and both cores read. For a
  // sink (whose writes come from one thread, in order) and for small windows,
  // each window is read here into one of two buffers and copied out by a helper
  // while the next one is read.
  Status Sweep(std::vector<Work>& work);

  // Whether the regions' bytes span more than one window of `span` (one
  // window gains nothing from a second worker).
  bool SeveralWindows(const std::vector<Work>& work, uint64_t span) const;

  // One window of a sweep, planned: its object bytes [begin, end), its
  // reads, and its pieces (copies out of staging, or, read in place, the
  // runs read straight into the targets).
  struct WindowJob {
    uint64_t begin = 0, end = 0;
    WindowRead window;
    std::vector<Piece> pieces;
    bool scatter = false;
  };

  // Planned windows shared by the two workers of SweepTwoWorkers.
  class WindowQueue;

  // Plans the next window of at most `span` bytes (advancing the regions'
  // cursors past it); nullopt when every region is served.
  std::optional<WindowJob> NextWindow(std::vector<Work>& work, uint64_t span);

  // Reads, verifies and delivers one window with `staging`, counting in
  // `stats`.
  Status RunWindow(WindowJob& job, std::vector<uint8_t>& staging,
                   LoadReport* stats);

  // The sweep on two threads: this one plans the windows, at most
  // kPlannedWindows ahead, and both this one (staging_[0]) and a helper
  // (staging_[1], counting in helper_stats_) take the next planned window
  // and read, verify and copy it out. The first error stops both.
  Status SweepTwoWorkers(std::vector<Work>& work, uint64_t span);

  // The byte ranges of window [begin, end) to read: the runs some region
  // needs, widened to whole chunks, those closer than max_read_gap_bytes
  // merged.
  std::vector<ByteRun> WindowReads(const std::vector<Work>& work,
                                   uint64_t begin, uint64_t end);

  // Whether a window's pieces can be read in place (sorting them by their
  // window offset if so): into memory, no two reading one byte, and long
  // enough that a read per row costs less than staging and copying it.
  bool Scatterable(std::vector<Piece>& pieces) const;

  // Reads window->reads (object ranges of window [begin, end)), filling in
  // where each read's bytes land. Without `scatter` every byte lands in
  // `staging` at its window offset; with it, the bytes of each piece land
  // at its target and only the others in `staging`. `staging` is sized to
  // the window when the first byte lands in it: read in place, a window
  // whose bytes all go to some target touches no staging memory.
  Status ReadWindow(uint64_t begin, uint64_t end, std::vector<uint8_t>& staging,
                    const std::vector<Piece>* scatter, WindowRead* window,
                    LoadReport* stats);

  // Verifies every read of a window where its bytes landed.
  Status Verify(const WindowRead& window, uint64_t* chunks_verified);

  // The runs of `w` inside [begin, end), from its cursor (which stays).
  void CollectRuns(const Work& w, uint64_t begin, uint64_t end);

  // The rows (or parts) of `w` inside object bytes [begin, end), as
  // copies from the window; pieces contiguous on both sides are merged.
  void PlanPieces(Work& w, uint64_t begin, uint64_t end,
                  std::vector<Piece>* pieces);

  // Copies the pieces out of a window: into memory, or to the sink. Target
  // memory is written with streaming stores (the load writes far more than
  // the cache holds, and nothing reads the targets back during it), fenced
  // before the window counts as delivered.
  Status Deliver(const std::vector<Piece>& pieces, const uint8_t* window);

  static uint8_t* Memory(uint64_t address) {
    return reinterpret_cast<uint8_t*>(address);
  }

  ObjectStore& b_;
  const RangedLoadOptions& o_;
  LoadReport* report_;
  RangedSink* sink_;
  const std::string* key_ = nullptr;
  const std::string* fid_ = nullptr;
  const ChunkSums* sums_ = nullptr;
  bool verified_ = true;
  std::vector<ReadRange> pending_;
  uint64_t pending_runs_ = 0;  // runs in pending_
  std::vector<uint8_t> chunk_buf_;
  std::vector<uint8_t> staging_[2];
  std::vector<ByteRun> runs_;
  // The counts of the sweep's second worker until they join the report.
  LoadReport helper_stats_;
};

}  // namespace reshard::internal::object_load

#endif  // RESHARD_STORE_OBJECT_LOADER_H_
