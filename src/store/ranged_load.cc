// RangedLoad: the store-to-runtime loader shared by WeightStore::Load and
// checkpoint loads (see ranged_load.h for the read strategy).

#include "store/ranged_load.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "bind/strided_stream.h"
#include "reshard/plan.h"
#include "store/progress.h"
#include "util/claimed_runs.h"
#include "util/stream_copy.h"

namespace reshard::internal {
namespace {

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

// Direct reads are issued in groups of at least this many bytes (ranges of
// at most this size) that two workers claim in turn, each verifying its
// group right after reading it.
constexpr uint64_t kPipelineBytes = uint64_t{4} << 20;

// Waits for `pending` (a helper's work) if there is any: `st` if it failed,
// else the helper's status.
Status Join(std::future<Status>* pending, Status st) {
  if (!pending->valid()) return st;
  Status helper = pending->get();
  return st.ok() ? helper : st;
}

// Adds what a worker counted in its own LoadReport (reads, checksums,
// copies) to the load's report, once the worker has finished.
void AddWorkerCounts(const LoadReport& worker, LoadReport* report) {
  report->read_requests += worker.read_requests;
  report->ranges += worker.ranges;
  report->bytes_read += worker.bytes_read;
  report->chunks_verified += worker.chunks_verified;
  report->bytes_copied += worker.bytes_copied;
}

// Windows smaller than this are copied out on the reading thread.
constexpr uint64_t kAsyncCopyBytes = uint64_t{1} << 20;

// Windows at least this large are shared by two workers
// (Loader::SweepTwoWorkers); smaller ones cost more to hand over.
constexpr uint64_t kTwoWorkerBytes = uint64_t{256} << 10;
// Windows planned ahead of the two workers (each holds its copy list).
constexpr size_t kPlannedWindows = 4;

class Loader {
 public:
  Loader(ObjectStore& backend, const RangedLoadOptions& options,
         LoadReport* report, RangedSink* sink)
      : b_(backend), o_(options), report_(report), sink_(sink) {}

  // `sums` describes the object (chunk_bytes 1 and no sums when
  // `verified` is false; its size is then the fragment's end).
  Status Run(const StoredFragment& fragment, const ChunkSums& sums,
             bool verified, std::vector<Work>& direct,
             std::vector<Work>& staged) {
    key_ = &fragment.object_key;
    fid_ = &fragment.stored_fragment_id;
    sums_ = &sums;
    verified_ = verified;
    RESHARD_RETURN_NOT_OK(DirectAll(direct));
    return Sweep(staged);
  }

  // The staging memory allocated so far.
  uint64_t staging_bytes() const {
    return chunk_buf_.size() + staging_[0].size() + staging_[1].size();
  }

 private:
  // Contiguous regions in object order: each is read unless an earlier
  // one read a source range containing it; those are copied from that
  // region's target after the reads.
  Status DirectAll(std::vector<Work>& direct) {
    std::sort(direct.begin(), direct.end(), [](const Work& a, const Work& b) {
      return a.object_base != b.object_base ? a.object_base < b.object_base
                                            : a.end() > b.end();
    });
    std::vector<std::pair<const Work*, const Work*>> copies;
    const Work* cover = nullptr;  // the read region reaching furthest
    for (const Work& w : direct) {
      if (cover != nullptr && cover->object_base <= w.object_base &&
          w.end() <= cover->end()) {
        copies.emplace_back(&w, cover);
        continue;
      }
      RESHARD_RETURN_NOT_OK(Direct(w));
      if (cover == nullptr || w.end() > cover->end()) cover = &w;
    }
    RESHARD_RETURN_NOT_OK(Flush());
    for (const auto& [w, from] : copies) {
      std::memcpy(
          Memory(w->target_base),
          Memory(from->target_base) + (w->object_base - from->object_base),
          w->source.total_bytes);
      report_->bytes_copied += w->source.total_bytes;
    }
    return Status::OK();
  }

  // A contiguous region: whole chunks straight into the target, edges via
  // the chunk buffer.
  Status Direct(const Work& w) {
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t begin = w.object_base;
    const uint64_t end = w.end();
    uint8_t* dest = Memory(w.target_base);
    const uint64_t first_full = (begin + c - 1) / c * c;
    uint64_t last_full = end / c * c;
    if (end == sums_->size) last_full = end;  // the short last chunk
    if (first_full >= last_full) {
      return Edge(begin, end, dest);
    }
    if (begin < first_full)
      RESHARD_RETURN_NOT_OK(Edge(begin, first_full, dest));
    const uint64_t step =
        std::max<uint64_t>(std::min(o_.max_range_bytes, kPipelineBytes) / c,
                           1) *
        c;
    for (uint64_t at = first_full; at < last_full;) {
      const uint64_t n = std::min(step, last_full - at);
      RESHARD_RETURN_NOT_OK(AddPending({*key_, at, n, dest + (at - begin)}));
      at += n;
    }
    if (last_full < end)
      RESHARD_RETURN_NOT_OK(Edge(last_full, end, dest + (last_full - begin)));
    return Status::OK();
  }

  // Object bytes [begin, end) within one chunk, through the chunk buffer.
  Status Edge(uint64_t begin, uint64_t end, uint8_t* dest) {
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t chunk = begin / c * c;
    const uint64_t n = std::min(c, sums_->size - chunk);
    if (chunk_buf_.size() < c) chunk_buf_.resize(c);
    RESHARD_RETURN_NOT_OK(
        Read({{*key_, chunk, n, chunk_buf_.data()}}, report_));
    RESHARD_RETURN_NOT_OK(Verify(chunk, chunk_buf_.data(), n));
    std::memcpy(dest, chunk_buf_.data() + (begin - chunk), end - begin);
    report_->bytes_copied += end - begin;
    return Status::OK();
  }

  // Queues a direct read; the queue is read once it holds
  // max_ranges_per_request runs and `r` would start another.
  Status AddPending(ReadRange r) {
    const bool continues =
        !pending_.empty() && RangeContinues(pending_.back(), r);
    if (!continues && pending_runs_ >= o_.max_ranges_per_request) {
      RESHARD_RETURN_NOT_OK(Flush());
    }
    if (pending_.empty() || !continues) ++pending_runs_;
    pending_.push_back(std::move(r));
    return Status::OK();
  }

  // Reads the pending direct ranges in groups of at least kPipelineBytes.
  // Two workers claim the groups in turn, each reading a group and then
  // verifying it while its bytes are still in the core's cache: both cores
  // copy out of the page cache (a single reader is bound by one core's copy
  // speed on warm files), and a slow read holds up only its own worker.
  // The error reported is the first in object order.
  Status Flush() {
    if (pending_.empty()) return Status::OK();
    pending_runs_ = 0;
    std::vector<size_t> starts = {0};  // group g: [starts[g], starts[g + 1])
    uint64_t bytes = 0;
    for (size_t i = 0; i + 1 < pending_.size(); ++i) {
      bytes += pending_[i].length;
      if (bytes >= kPipelineBytes) {
        starts.push_back(i + 1);
        bytes = 0;
      }
    }
    starts.push_back(pending_.size());
    std::array<LoadReport, 2> stats;  // per worker, added up below
    Status st = ForEachClaimedUntilError(
        starts.size() - 1, 2, [&](size_t g, unsigned worker) {
          const std::vector<ReadRange> group(pending_.begin() + starts[g],
                                             pending_.begin() + starts[g + 1]);
          RESHARD_RETURN_NOT_OK(Read(group, &stats[worker]));
          if (!verified_) return Status::OK();
          for (const ReadRange& r : group) {
            RESHARD_RETURN_NOT_OK(VerifyChunks(
                *sums_, r.offset, static_cast<const uint8_t*>(r.dest), r.length,
                *key_, *fid_, &stats[worker].chunks_verified));
          }
          return Status::OK();
        });
    pending_.clear();
    for (const LoadReport& w : stats) AddWorkerCounts(w, report_);
    return st;
  }

  Status Verify(uint64_t offset, const uint8_t* data, uint64_t n) {
    if (!verified_) return Status::OK();
    return VerifyChunks(*sums_, offset, data, n, *key_, *fid_,
                        &report_->chunks_verified);
  }

  // Reads `ranges`, counting them in `stats` (the report, or the sweep
  // helper's own counts).
  Status Read(const std::vector<ReadRange>& ranges, LoadReport* stats) {
    ++stats->read_requests;
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (i == 0 || !RangeContinues(ranges[i - 1], ranges[i])) ++stats->ranges;
      stats->bytes_read += ranges[i].length;
    }
    Status st = b_.ReadRanges(ranges);
    if (!st.ok()) return st.WithContext("stored fragment " + *fid_);
    return st;
  }

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
  Status Sweep(std::vector<Work>& work) {
    std::sort(work.begin(), work.end(), [](const Work& a, const Work& b) {
      return a.object_base < b.object_base;
    });
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t half = std::max<uint64_t>(o_.staging_bytes / 2 / c, 1) * c;
    uint64_t window =
        std::max<uint64_t>(std::min(o_.staged_window_bytes, half) / c, 1) * c;
    // A backend that reads whole values at about the cost of their parts:
    // windows of whole values (Redis: a GET each, not a GETRANGE of a
    // quarter), whatever the option, within the staging limit.
    // (window <= half, so the widened window is never smaller.)
    const uint64_t preferred = b_.PreferredReadBytes();
    if (preferred > window)
      window = std::min((preferred + c - 1) / c * c, half);
    if (sink_ == nullptr && window >= kTwoWorkerBytes &&
        SeveralWindows(work, window)) {
      return SweepTwoWorkers(work, window);
    }
    std::future<Status> copying;  // the previous window's copies
    for (size_t k = 0;; ++k) {
      std::optional<WindowJob> job = NextWindow(work, window);
      if (!job.has_value()) break;
      std::vector<uint8_t>& buf = staging_[k % 2];
      Status st = ReadWindow(job->begin, job->end, buf,
                             job->scatter ? &job->pieces : nullptr,
                             &job->window, report_);
      RESHARD_RETURN_NOT_OK(Join(&copying, st));
      if (job->scatter) {  // the bytes are in place: verify while reading on
        copying =
            std::async(std::launch::async, [this, w = std::move(job->window)] {
              return Verify(w, &report_->chunks_verified);
            });
        continue;
      }
      for (const Piece& p : job->pieces) report_->bytes_copied += p.n;
      const bool small = job->end - job->begin < kAsyncCopyBytes;
      // Verified before anything is delivered (a sink may be a file).
      auto deliver = [this, j = std::move(*job), data = buf.data()] {
        RESHARD_RETURN_NOT_OK(Verify(j.window, &report_->chunks_verified));
        return Deliver(j.pieces, data);
      };
      if (small) {
        RESHARD_RETURN_NOT_OK(deliver());
      } else {
        copying = std::async(std::launch::async, std::move(deliver));
      }
    }
    return Join(&copying, Status::OK());
  }

  // Whether the regions' bytes span more than one window of `span` (one
  // window gains nothing from a second worker).
  bool SeveralWindows(const std::vector<Work>& work, uint64_t span) const {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const Work& w : work) {
      if (w.rows == 0) continue;
      lo = std::min(lo, w.object_base);
      hi = std::max(hi, w.end());
    }
    const uint64_t c = sums_->chunk_bytes;
    return lo != UINT64_MAX && hi - lo / c * c > span;
  }

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
  class WindowQueue {
   public:
    void Push(WindowJob job) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        jobs_.push_back(std::move(job));
      }
      cv_.notify_one();
    }
    // No more windows will be pushed.
    void Close() {
      {
        std::lock_guard<std::mutex> lock(mu_);
        closed_ = true;
      }
      cv_.notify_all();
    }
    // Stops both workers; the first failure is kept.
    void Fail(Status st) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.ok()) error_ = std::move(st);
        closed_ = true;
        jobs_.clear();
      }
      cv_.notify_all();
    }
    // The next window, waiting for one; nullopt once closed and empty.
    std::optional<WindowJob> Pop() {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return closed_ || !jobs_.empty(); });
      return TakeLocked();
    }
    // The next window if one is planned.
    std::optional<WindowJob> TryPop() {
      std::lock_guard<std::mutex> lock(mu_);
      return TakeLocked();
    }
    size_t size() {
      std::lock_guard<std::mutex> lock(mu_);
      return jobs_.size();
    }
    bool failed() {
      std::lock_guard<std::mutex> lock(mu_);
      return !error_.ok();
    }
    Status error() {
      std::lock_guard<std::mutex> lock(mu_);
      return error_;
    }

   private:
    std::optional<WindowJob> TakeLocked() {
      if (jobs_.empty()) return std::nullopt;
      WindowJob job = std::move(jobs_.front());
      jobs_.pop_front();
      return job;
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<WindowJob> jobs_;
    bool closed_ = false;
    Status error_;
  };

  // Plans the next window of at most `span` bytes (advancing the regions'
  // cursors past it); nullopt when every region is served.
  std::optional<WindowJob> NextWindow(std::vector<Work>& work, uint64_t span) {
    uint64_t next = UINT64_MAX;
    for (const Work& w : work) {
      if (w.row < w.rows) next = std::min(next, w.NextOffset());
    }
    if (next == UINT64_MAX) return std::nullopt;
    const uint64_t c = sums_->chunk_bytes;
    WindowJob job;
    job.begin = next / c * c;
    uint64_t end = job.begin + span;
    // Windows end at the backend's value boundaries where those hold whole
    // checksum chunks (a window is whole chunks), so that the next starts
    // at one (a window then reads whole values).
    const uint64_t p = b_.PreferredReadBytes();
    if (p > 0 && p % c == 0 && end / p * p > job.begin) end = end / p * p;
    job.end = std::min(end, sums_->size);
    job.window.reads = WindowReads(work, job.begin, job.end);
    for (Work& w : work) PlanPieces(w, job.begin, job.end, &job.pieces);
    job.scatter = Scatterable(job.pieces);
    return job;
  }

  // Reads, verifies and delivers one window with `staging`, counting in
  // `stats`.
  Status RunWindow(WindowJob& job, std::vector<uint8_t>& staging,
                   LoadReport* stats) {
    RESHARD_RETURN_NOT_OK(ReadWindow(job.begin, job.end, staging,
                                     job.scatter ? &job.pieces : nullptr,
                                     &job.window, stats));
    RESHARD_RETURN_NOT_OK(Verify(job.window, &stats->chunks_verified));
    if (job.scatter) return Status::OK();
    for (const Piece& p : job.pieces) stats->bytes_copied += p.n;
    return Deliver(job.pieces, staging.data());
  }

  // The sweep on two threads: this one plans the windows, at most
  // kPlannedWindows ahead, and both this one (staging_[0]) and a helper
  // (staging_[1], counting in helper_stats_) take the next planned window
  // and read, verify and copy it out. The first error stops both.
  Status SweepTwoWorkers(std::vector<Work>& work, uint64_t span) {
    WindowQueue queue;
    std::thread helper([this, &queue] {
      while (std::optional<WindowJob> job = queue.Pop()) {
        Status st = RunWindow(*job, staging_[1], &helper_stats_);
        if (!st.ok()) return queue.Fail(std::move(st));
      }
    });
    Status st;
    bool planning = true;
    while (st.ok() && !queue.failed()) {
      if (planning && queue.size() < kPlannedWindows) {
        std::optional<WindowJob> job = NextWindow(work, span);
        planning = job.has_value();
        planning ? queue.Push(std::move(*job)) : queue.Close();
        continue;
      }
      std::optional<WindowJob> job = queue.TryPop();
      if (!job.has_value()) {
        if (!planning) break;  // every window taken; the helper finishes
        continue;
      }
      st = RunWindow(*job, staging_[0], report_);
    }
    if (!st.ok()) queue.Fail(st);
    helper.join();
    AddWorkerCounts(helper_stats_, report_);
    helper_stats_ = LoadReport();
    return st.ok() ? queue.error() : st;
  }

  // The byte ranges of window [begin, end) to read: the runs some region
  // needs, widened to whole chunks, those closer than max_read_gap_bytes
  // merged.
  std::vector<ByteRun> WindowReads(const std::vector<Work>& work,
                                   uint64_t begin, uint64_t end) {
    runs_.clear();
    for (const Work& w : work) CollectRuns(w, begin, end);
    std::sort(runs_.begin(), runs_.end());
    const uint64_t c = sums_->chunk_bytes;
    std::vector<ByteRun> reads;
    for (const ByteRun& r : runs_) {
      const uint64_t b = r.first / c * c;
      const uint64_t e = std::min((r.second + c - 1) / c * c, end);
      if (!reads.empty() && b <= reads.back().second + o_.max_read_gap_bytes) {
        reads.back().second = std::max(reads.back().second, e);
      } else {
        reads.emplace_back(b, e);
      }
    }
    return reads;
  }

  // Whether a window's pieces can be read in place (sorting them by their
  // window offset if so): into memory, no two reading one byte, and long
  // enough that a read per row costs less than staging and copying it.
  bool Scatterable(std::vector<Piece>& pieces) const {
    if (sink_ != nullptr || pieces.empty()) return false;
    uint64_t total = 0;
    for (const Piece& p : pieces) total += p.n;
    if (total / pieces.size() < o_.min_scatter_bytes) return false;
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.from < b.from; });
    for (size_t i = 1; i < pieces.size(); ++i) {
      if (pieces[i - 1].from + pieces[i - 1].n > pieces[i].from) return false;
    }
    return true;
  }

  // Reads window->reads (object ranges of window [begin, end)), filling in
  // where each read's bytes land. Without `scatter` every byte lands in
  // `staging` at its window offset; with it, the bytes of each piece land
  // at its target and only the others in `staging`. `staging` is sized to
  // the window when the first byte lands in it: read in place, a window
  // whose bytes all go to some target touches no staging memory.
  Status ReadWindow(uint64_t begin, uint64_t end, std::vector<uint8_t>& staging,
                    const std::vector<Piece>* scatter, WindowRead* window,
                    LoadReport* stats) {
    const std::vector<ByteRun>& reads = window->reads;
    std::vector<ReadRange>& ranges = window->ranges;
    // Staging for window bytes [b, e): b's place in the window's buffer.
    auto buf_at = [&](uint64_t b, uint64_t e) -> uint8_t* {
      if (b == e) return nullptr;  // nothing lands there
      if (staging.size() < end - begin) staging.resize(end - begin);
      return staging.data() + (b - begin);
    };
    auto add = [&](uint64_t b, uint64_t e, uint8_t* dest) {
      for (uint64_t at = b; at < e;) {
        const uint64_t n = std::min(e - at, o_.max_range_bytes);
        ranges.push_back({*key_, at, n, dest + (at - b)});
        at += n;
      }
    };
    size_t p = 0;
    for (const auto& [b, e] : reads) {
      uint64_t at = b;
      for (; scatter != nullptr && p < scatter->size() &&
             begin + (*scatter)[p].from < e;
           ++p) {
        const Piece& piece = (*scatter)[p];
        const uint64_t from = begin + piece.from;
        if (from < at || from + piece.n > e) {
          return Status::Internal("load window pieces outside its reads in " +
                                  *key_);
        }
        add(at, from, buf_at(at, from));
        add(from, from + piece.n, Memory(piece.to));
        at = from + piece.n;
      }
      add(at, e, buf_at(at, e));
      window->ends.push_back(ranges.size());
    }
    // Requests of at most max_ranges_per_request runs (ranges continuing
    // each other, as rows read in place do, count once).
    for (size_t i = 0; i < ranges.size();) {
      size_t j = i + 1;
      for (uint64_t runs = 1; j < ranges.size(); ++j) {
        if (!RangeContinues(ranges[j - 1], ranges[j]) &&
            ++runs > o_.max_ranges_per_request) {
          break;
        }
      }
      RESHARD_RETURN_NOT_OK(
          Read(std::vector<ReadRange>(ranges.begin() + i, ranges.begin() + j),
               stats));
      i = j;
    }
    return Status::OK();
  }

  // Verifies every read of a window where its bytes landed.
  Status Verify(const WindowRead& window, uint64_t* chunks_verified) {
    if (!verified_) return Status::OK();
    size_t first = 0;
    for (size_t i = 0; i < window.reads.size(); ++i) {
      std::vector<ConstBuffer> parts;
      for (size_t j = first; j < window.ends[i]; ++j) {
        parts.push_back({window.ranges[j].dest, window.ranges[j].length});
      }
      first = window.ends[i];
      RESHARD_RETURN_NOT_OK(VerifyChunks(*sums_, window.reads[i].first, parts,
                                         *key_, *fid_, chunks_verified));
    }
    return Status::OK();
  }

  // The runs of `w` inside [begin, end), from its cursor (which stays).
  void CollectRuns(const Work& w, uint64_t begin, uint64_t end) {
    uint64_t row = w.row;
    uint64_t within = w.within;
    while (row < w.rows) {
      const uint64_t at = w.object_base + RowOffset(w.source, row) + within;
      if (at < begin || at >= end) return;
      const uint64_t n = std::min(w.source.inner_bytes - within, end - at);
      if (!runs_.empty() && runs_.back().second == at) {
        runs_.back().second = at + n;  // adjacent rows: one run
      } else {
        runs_.emplace_back(at, at + n);
      }
      within = 0;
      ++row;
    }
  }

  // The rows (or parts) of `w` inside object bytes [begin, end), as
  // copies from the window; pieces contiguous on both sides are merged.
  void PlanPieces(Work& w, uint64_t begin, uint64_t end,
                  std::vector<Piece>* pieces) {
    const uint64_t inner = w.source.inner_bytes;
    while (w.row < w.rows) {
      const uint64_t at = w.NextOffset();
      if (at < begin || at >= end) return;
      const uint64_t n = std::min(inner - w.within, end - at);
      const uint64_t to = w.target_base + RowOffset(w.target, w.row) + w.within;
      if (!pieces->empty() && pieces->back().to + pieces->back().n == to &&
          pieces->back().from + pieces->back().n == at - begin) {
        pieces->back().n += n;
      } else {
        pieces->push_back({to, at - begin, n});
      }
      w.within += n;
      if (w.within == inner) {
        w.within = 0;
        ++w.row;
      }
    }
  }

  // Copies the pieces out of a window: into memory, or to the sink. Target
  // memory is written with streaming stores (the load writes far more than
  // the cache holds, and nothing reads the targets back during it), fenced
  // before the window counts as delivered.
  Status Deliver(const std::vector<Piece>& pieces, const uint8_t* window) {
    if (sink_ == nullptr) {
      for (const Piece& p : pieces) {
        StreamCopy(Memory(p.to), window + p.from, p.n);
      }
      StreamFence();
      return Status::OK();
    }
    for (const Piece& p : pieces) {
      RESHARD_RETURN_NOT_OK(sink_->Write(p.to, window + p.from, p.n));
    }
    return Status::OK();
  }

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

// The load's target memory, by placement fragment id.
struct BoundTarget {
  const RuntimeBindingFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

// The regions of one stored fragment (one object range), split into
// direct and staged work.
struct PerObject {
  const StoredFragment* fragment = nullptr;
  std::vector<Work> direct, staged;
};

// Turns the plan's regions into work per stored fragment, after checking
// every target (memory kind, rule 56: no two loaded target views at one
// physical address, since a stored source never authorises target alias
// de-duplication) and every source (rule 67: a fragment of this manifest).
class LoadWorkBuilder {
 public:
  LoadWorkBuilder(const StoredWeightManifest& manifest,
                  const std::vector<WeightRuntimeBindingManifest>& bindings,
                  LoadReport* report)
      : report_(report) {
    for (const auto& b : bindings) {
      for (const auto& f : b.fragments()) {
        bound_[f.placement_fragment_id()] = {&f, &b};
      }
    }
    for (const auto& f : manifest.fragments())
      stored_[f.stored_fragment_id] = &f;
  }

  Status Add(const LogicalTransferPlan& plan, const TransferRegion& r) {
    const PlanFragment& tf = plan.target_fragments()[r.target_fragment];
    auto t = bound_.find(tf.fragment_id);
    if (t == bound_.end()) return Status::OK();  // not filled by this load
    RESHARD_RETURN_NOT_OK(CheckTarget(tf, t->second));
    return AddAt(plan, r, t->second.fragment->address() + r.target_base_offset,
                 /*staged_only=*/false);
  }

  // Region `r` with its target's first byte at `target_base`; every
  // region is staged for a sink (nothing is read into its positions).
  Status AddAt(const LogicalTransferPlan& plan, const TransferRegion& r,
               uint64_t target_base, bool staged_only) {
    const PlanFragment& sf = plan.source_fragments()[r.source_fragment];
    auto sit = stored_.find(sf.fragment_id);
    if (sit == stored_.end()) {
      return Status::Internal("load plan sources and manifest differ: " +
                              std::string(sf.fragment_id));
    }
    const StoredFragment* s = sit->second;
    BoundRegion br;
    br.inner_bytes = r.inner_bytes;
    br.loops = r.loops;
    br.bytes = r.bytes;
    Work w;
    w.object_base = s->object_offset + r.source_base_offset;
    w.source = StridedSide::Source(br);
    w.target = StridedSide::Target(br);
    w.target_base = target_base;
    w.rows = r.inner_bytes == 0 ? 0 : r.bytes / r.inner_bytes;
    auto& per = objects_[s->stored_fragment_id];
    per.fragment = s;
    const bool direct =
        !staged_only && w.source.contiguous() && w.target.contiguous();
    (direct ? per.direct : per.staged).push_back(std::move(w));
    report_->bytes += r.bytes;
    ++report_->regions;
    return Status::OK();
  }

  std::map<std::string_view, PerObject>& objects() { return objects_; }

 private:
  Status CheckTarget(const PlanFragment& tf, const BoundTarget& t) {
    const RuntimeBindingFragment& tv = *t.fragment;
    const auto space = std::tuple{std::string_view(t.binding->instance_id()),
                                  std::string_view(tv.worker_id()),
                                  std::string_view(tv.device()), tv.address()};
    auto [it, fresh] = written_.emplace(space, tf.fragment_id);
    if (!fresh && it->second != tf.fragment_id) {
      return Status::FailedPrecondition("conflicting target physical range: " +
                                        std::string(tf.fragment_id));
    }
    if (!fresh) return Status::OK();
    return RequireMemoryKind(tv, {MemoryKind::kHost}, "store load", "target",
                             t.binding->participant_id());
  }

  LoadReport* report_;
  std::unordered_map<std::string_view, BoundTarget> bound_;
  std::unordered_map<std::string_view, const StoredFragment*> stored_;
  std::map<std::string_view, PerObject> objects_;
  std::map<std::tuple<std::string_view, std::string_view, std::string_view,
                      uint64_t>,
           std::string_view>
      written_;
};

// Serves every stored fragment's work in object order.
Status Execute(ObjectStore& backend, const RangedLoadOptions& options,
               LoadWorkBuilder& work, RangedSink* sink, LoadReport* report) {
  // Fragments in object order: a file holding many fragments (a
  // checkpoint) is read front to back.
  std::vector<PerObject*> order;
  for (auto& [fid, per] : work.objects()) order.push_back(&per);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->fragment->object_key, a->fragment->object_offset) <
           std::tie(b->fragment->object_key, b->fragment->object_offset);
  });
  Loader loader(backend, options, report, sink);
  ProgressMeter progress(options.progress, report->bytes);
  for (PerObject* p : order) {
    uint64_t bytes = 0;
    for (const Work& w : p->direct) bytes += w.source.total_bytes;
    for (const Work& w : p->staged) bytes += w.source.total_bytes;
    const StoredFragment& s = *p->fragment;
    ChunkSums sums;
    const bool verified = static_cast<bool>(options.chunk_sums);
    if (verified) {
      RESHARD_ASSIGN_OR_RETURN(sums, options.chunk_sums(s));
    } else {
      sums.chunk_bytes = 1;
      sums.size = s.object_offset + s.nbytes;
    }
    RESHARD_RETURN_NOT_OK(loader.Run(s, sums, verified, p->direct, p->staged));
    progress.Add(bytes);
  }
  progress.Finish();
  report->staging_bytes = loader.staging_bytes();
  return Status::OK();
}

}  // namespace

Result<LoadReport> RangedLoad(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const RangedLoadOptions& options) {
  PlanOptions plan_options;
  if (target_bindings.size() == 1) {
    plan_options.target_participant_id = target_bindings[0].participant_id();
  }
  RESHARD_ASSIGN_OR_RETURN(auto plan, LogicalTransferPlan::MakeFromStored(
                                          manifest, target, plan_options));
  LoadReport report;
  LoadWorkBuilder work(manifest, target_bindings, &report);
  for (const TransferRegion& r : plan.regions()) {
    RESHARD_RETURN_NOT_OK(work.Add(plan, r));
  }
  // Rule 67: at least one operation.
  if (report.regions == 0) {
    return Status::InvalidArgument(
        "load plan has no operations: the target bindings bind no fragment "
        "of " +
        manifest.manifest_key() + "'s target placement");
  }
  RESHARD_RETURN_NOT_OK(Execute(backend, options, work, nullptr, &report));
  return report;
}

Result<LoadReport> RangedLoadToSink(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const LogicalTransferPlan& plan,
    const std::function<uint64_t(const TransferRegion&)>& target_position,
    RangedSink& sink, const RangedLoadOptions& options) {
  LoadReport report;
  LoadWorkBuilder work(manifest, {}, &report);
  for (const TransferRegion& r : plan.regions()) {
    RESHARD_RETURN_NOT_OK(
        work.AddAt(plan, r, target_position(r), /*staged_only=*/true));
  }
  RESHARD_RETURN_NOT_OK(Execute(backend, options, work, &sink, &report));
  return report;
}

}  // namespace reshard::internal
