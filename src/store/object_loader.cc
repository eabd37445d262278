// Loader (object_loader.h): one stored object's regions read, verified
// and delivered to their targets.

#include "store/object_loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "util/claimed_runs.h"
#include "util/stream_copy.h"

namespace reshard::internal::object_load {
namespace {

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

}  // namespace

// Planned windows shared by the two workers of SweepTwoWorkers.
class Loader::WindowQueue {
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

Status Loader::Run(const StoredFragment& fragment, const ChunkSums& sums,
                   bool verified, std::vector<Work>& direct,
                   std::vector<Work>& staged) {
  key_ = &fragment.object_key;
  fid_ = &fragment.stored_fragment_id;
  sums_ = &sums;
  verified_ = verified;
  RESHARD_RETURN_NOT_OK(DirectAll(direct));
  return Sweep(staged);
}

Status Loader::DirectAll(std::vector<Work>& direct) {
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

Status Loader::Direct(const Work& w) {
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
  if (begin < first_full) RESHARD_RETURN_NOT_OK(Edge(begin, first_full, dest));
  const uint64_t step =
      std::max<uint64_t>(std::min(o_.max_range_bytes, kPipelineBytes) / c, 1) *
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

Status Loader::Edge(uint64_t begin, uint64_t end, uint8_t* dest) {
  const uint64_t c = sums_->chunk_bytes;
  const uint64_t chunk = begin / c * c;
  const uint64_t n = std::min(c, sums_->size - chunk);
  if (chunk_buf_.size() < c) chunk_buf_.resize(c);
  RESHARD_RETURN_NOT_OK(Read({{*key_, chunk, n, chunk_buf_.data()}}, report_));
  RESHARD_RETURN_NOT_OK(Verify(chunk, chunk_buf_.data(), n));
  std::memcpy(dest, chunk_buf_.data() + (begin - chunk), end - begin);
  report_->bytes_copied += end - begin;
  return Status::OK();
}

Status Loader::AddPending(ReadRange r) {
  const bool continues =
      !pending_.empty() && RangeContinues(pending_.back(), r);
  if (!continues && pending_runs_ >= o_.max_ranges_per_request) {
    RESHARD_RETURN_NOT_OK(Flush());
  }
  if (pending_.empty() || !continues) ++pending_runs_;
  pending_.push_back(std::move(r));
  return Status::OK();
}

Status Loader::Flush() {
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

Status Loader::Verify(uint64_t offset, const uint8_t* data, uint64_t n) {
  if (!verified_) return Status::OK();
  return VerifyChunks(*sums_, offset, data, n, *key_, *fid_,
                      &report_->chunks_verified);
}

Status Loader::Read(const std::vector<ReadRange>& ranges, LoadReport* stats) {
  ++stats->read_requests;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i == 0 || !RangeContinues(ranges[i - 1], ranges[i])) ++stats->ranges;
    stats->bytes_read += ranges[i].length;
  }
  Status st = b_.ReadRanges(ranges);
  if (!st.ok()) return st.WithContext("stored fragment " + *fid_);
  return st;
}

Status Loader::Sweep(std::vector<Work>& work) {
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
  if (preferred > window) window = std::min((preferred + c - 1) / c * c, half);
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
                           job->scatter ? &job->pieces : nullptr, &job->window,
                           report_);
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

bool Loader::SeveralWindows(const std::vector<Work>& work,
                            uint64_t span) const {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const Work& w : work) {
    if (w.rows == 0) continue;
    lo = std::min(lo, w.object_base);
    hi = std::max(hi, w.end());
  }
  const uint64_t c = sums_->chunk_bytes;
  return lo != UINT64_MAX && hi - lo / c * c > span;
}

std::optional<Loader::WindowJob> Loader::NextWindow(std::vector<Work>& work,
                                                    uint64_t span) {
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

Status Loader::RunWindow(WindowJob& job, std::vector<uint8_t>& staging,
                         LoadReport* stats) {
  RESHARD_RETURN_NOT_OK(ReadWindow(job.begin, job.end, staging,
                                   job.scatter ? &job.pieces : nullptr,
                                   &job.window, stats));
  RESHARD_RETURN_NOT_OK(Verify(job.window, &stats->chunks_verified));
  if (job.scatter) return Status::OK();
  for (const Piece& p : job.pieces) stats->bytes_copied += p.n;
  return Deliver(job.pieces, staging.data());
}

Status Loader::SweepTwoWorkers(std::vector<Work>& work, uint64_t span) {
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

std::vector<ByteRun> Loader::WindowReads(const std::vector<Work>& work,
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

bool Loader::Scatterable(std::vector<Piece>& pieces) const {
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

Status Loader::ReadWindow(uint64_t begin, uint64_t end,
                          std::vector<uint8_t>& staging,
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
    RESHARD_RETURN_NOT_OK(Read(
        std::vector<ReadRange>(ranges.begin() + i, ranges.begin() + j), stats));
    i = j;
  }
  return Status::OK();
}

Status Loader::Verify(const WindowRead& window, uint64_t* chunks_verified) {
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

void Loader::CollectRuns(const Work& w, uint64_t begin, uint64_t end) {
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

void Loader::PlanPieces(Work& w, uint64_t begin, uint64_t end,
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

Status Loader::Deliver(const std::vector<Piece>& pieces,
                       const uint8_t* window) {
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

}  // namespace reshard::internal::object_load
