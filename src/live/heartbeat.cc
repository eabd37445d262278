#include "live/heartbeat.h"

#include <algorithm>

#include "live/live_records.h"

namespace reshard::live_internal {

Result<std::unique_ptr<Heartbeat>> Heartbeat::Start(
    RecordStore& store, std::string prefix, uint32_t rank,
    std::chrono::milliseconds interval, uint64_t first) {
  std::unique_ptr<Heartbeat> h(
      new Heartbeat(store, std::move(prefix), rank, interval));
  h->beat_ = std::max<uint64_t>(first, 1);
  RESHARD_RETURN_NOT_OK(
      store.Put(h->Key(h->beat_), internal::EncodeMarkerRecord(rank)));
  h->thread_ = std::thread([p = h.get()] { p->Run(); });
  return h;
}

Heartbeat::Heartbeat(RecordStore& store, std::string prefix, uint32_t rank,
                     std::chrono::milliseconds interval)
    : store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      interval_(std::max(interval, std::chrono::milliseconds(1))) {}

Heartbeat::~Heartbeat() { Stop(/*remove=*/false); }

std::string Heartbeat::Key(uint64_t n) const {
  return prefix_ + "alive/" + std::to_string(rank_) + "/" + std::to_string(n);
}

void Heartbeat::Stop(bool remove) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (remove && beat_ > 0) {
    (void)store_.Delete(Key(beat_));
    beat_ = 0;
  }
}

uint64_t Heartbeat::beats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return beat_;
}

void Heartbeat::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, interval_, [&] { return stop_; })) {
    const uint64_t next = beat_ + 1;
    lock.unlock();
    // A failed Put (the store unreachable for a moment) is retried at the
    // next beat with the same counter; watchers see the counter still.
    const bool published =
        store_.Put(Key(next), internal::EncodeMarkerRecord(rank_)).ok();
    if (published) (void)store_.Delete(Key(next - 1));
    lock.lock();
    if (published) beat_ = next;
  }
}

PeerWatch::PeerWatch(RecordStore& store, std::string prefix, uint32_t self,
                     uint32_t ranks, std::chrono::milliseconds timeout)
    : store_(store),
      prefix_(std::move(prefix)),
      self_(self),
      timeout_(timeout),
      seen_(ranks) {}

Status PeerWatch::Refresh(Clock::time_point now) {
  const std::string base = prefix_ + "alive/";
  RESHARD_ASSIGN_OR_RETURN(auto keys, store_.List(base));
  std::vector<std::optional<uint64_t>> latest(seen_.size());
  for (const std::string& key : keys) {
    // alive/<r>/<n>, both decimal without leading zeros.
    const std::string_view rest = std::string_view(key).substr(base.size());
    const size_t slash = rest.find('/');
    uint64_t values[2] = {0, 0};
    bool ok = slash != std::string_view::npos;
    const std::string_view parts[2] = {rest.substr(0, ok ? slash : 0),
                                       ok ? rest.substr(slash + 1) : ""};
    for (int i = 0; i < 2 && ok; ++i) {
      const std::string_view d = parts[i];
      ok = !d.empty() && d.size() <= 19 && (d.size() == 1 || d[0] != '0');
      for (char c : d) {
        ok = ok && c >= '0' && c <= '9';
        values[i] = values[i] * 10 + static_cast<uint64_t>(c - '0');
      }
    }
    if (!ok || values[0] >= seen_.size()) {
      return Status::InvalidArgument(
          "live session heartbeat " + key + " names no rank of " +
          std::to_string(seen_.size()) + " with a counter");
    }
    auto& l = latest[values[0]];
    l = std::max(l.value_or(0), values[1]);
  }
  for (size_t r = 0; r < seen_.size(); ++r) {
    Seen& s = seen_[r];
    if (!latest[r].has_value()) continue;  // never seen, or gone: no news
    if (!s.seen || *latest[r] != s.beat) {
      s.seen = true;
      s.beat = *latest[r];
      s.changed = now;
    }
  }
  return Status::OK();
}

Result<std::optional<uint32_t>> PeerWatch::FirstSilent(
    const std::function<bool(uint32_t rank)>& exempt) {
  const auto now = Clock::now();
  if (now >= next_list_) {
    RESHARD_RETURN_NOT_OK(Refresh(now));
    next_list_ = now + std::max(timeout_ / 8, std::chrono::milliseconds(1));
  }
  for (uint32_t r = 0; r < seen_.size(); ++r) {
    if (r == self_ || !seen_[r].seen) continue;
    if (now - seen_[r].changed <= timeout_) continue;
    if (exempt && exempt(r)) continue;
    return std::optional<uint32_t>(r);
  }
  return std::optional<uint32_t>();
}

void PeerWatch::Forget(uint32_t r) {
  if (r < seen_.size()) seen_[r] = Seen{};
}

int64_t PeerWatch::SilentMillis(uint32_t r) const {
  if (r >= seen_.size() || !seen_[r].seen) return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                               seen_[r].changed)
      .count();
}

}  // namespace reshard::live_internal
