// The plan's summary (docs/planner.md, step 7): totals, per-participant
// bytes, traffic and pipeline routes, summed over ranges of regions on the
// planner's threads.

#include "plan/plan_summary.h"

#include <algorithm>
#include <array>
#include <iterator>

#include "plan/plan_impl.h"
#include "plan/planner.h"
#include "plan/source_tiling.h"
#include "util/claimed_runs.h"
#include "util/string_sort.h"

namespace reshard::internal {
namespace {

// (source pp, source stage, target pp, target stage); -1 when unset.
using RouteKey = std::array<int64_t, 4>;

// (operations, bytes) per pipeline route.
using RouteTotals = std::map<RouteKey, std::pair<uint64_t, uint64_t>>;

}  // namespace

StageIds MakeStageIds(const std::vector<PlanFragment>& table, bool no_pp) {
  StageIds out;
  out.of.resize(table.size());
  std::map<std::pair<int64_t, int64_t>, uint32_t> ids;
  std::pair<int64_t, int64_t> last{INT64_MIN, INT64_MIN};
  uint32_t last_id = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::pair<int64_t, int64_t> stage{
        no_pp ? -1 : table[i].rank.pp, table[i].pipeline_stage_id.value_or(-1)};
    if (i == 0 || stage != last) {  // fragments come grouped by part
      auto [it, added] =
          ids.emplace(stage, static_cast<uint32_t>(out.stages.size()));
      if (added) out.stages.push_back(stage);
      last = stage;
      last_id = it->second;
    }
    out.of[i] = last_id;
  }
  return out;
}

void SumTraffic(TrafficPairs* traffic) {
  // By pair only: the order among equal pairs does not change their sum.
  RadixSortByFirst(traffic);
  size_t out = 0;
  for (size_t i = 0; i < traffic->size(); ++i) {
    if (out > 0 && (*traffic)[out - 1].first == (*traffic)[i].first) {
      (*traffic)[out - 1].second += (*traffic)[i].second;
    } else {
      (*traffic)[out++] = (*traffic)[i];
    }
  }
  traffic->resize(out);
}

void Planner::BuildSourceSummaryColumns() {
  source_stages_ =
      MakeStageIds(impl_->source_fragments,
                   impl_->source_kind == PlanSourceKind::kStoredManifest);
}

void Planner::BuildTargetSummaryColumns() {
  const auto& tfr = impl_->target_fragments;
  target_stages_ = MakeStageIds(tfr, false);
  target_participant_.resize(tfr.size());
  for (size_t i = 0; i < tfr.size(); ++i) {
    target_participant_[i] = tfr[i].participant;
  }
}

void Planner::Summarise() {
  const auto& sfr = impl_->source_fragments;
  // The regions in one range per thread.
  const StageIds& source = source_stages_;
  const StageIds& target = target_stages_;
  const std::vector<uint32_t>& target_participant = target_participant_;
  const size_t n = impl_->regions.size();
  std::vector<SummaryPart> parts(threads_);
  ForEachClaimed(parts.size(), threads_, [&](size_t k, unsigned) {
    SummariseRange(n * k / parts.size(), n * (k + 1) / parts.size(), source,
                   target, target_participant, &parts[k]);
  });
  // The parts' sums added: every figure is a sum, the same in any order.
  PlanSummary& sum = impl_->summary;
  impl_->target_bytes.assign(impl_->target_participants.size(), 0);
  RouteTotals routes;
  std::vector<uint8_t> used(sfr.size(), 0);
  for (const SummaryPart& part : parts) {
    sum.regions += part.regions;
    sum.bytes += part.bytes;
    for (size_t i = 0; i < part.target_bytes.size(); ++i) {
      impl_->target_bytes[i] += part.target_bytes[i];
    }
    for (size_t i = 0; i < used.size(); ++i) used[i] |= part.used[i];
    for (const auto& [ids, totals] : part.routes) {
      const auto& [sp, ss] = source.stages[ids >> 32];
      const auto& [tp, ts] = target.stages[ids & 0xFFFFFFFFu];
      auto& route = routes[RouteKey{sp, ss, tp, ts}];
      route.first += totals.first;
      route.second += totals.second;
    }
  }
  sum.source_fragments_used = std::count(used.begin(), used.end(), 1);
  sum.operations = sum.regions;
  for (uint64_t b : impl_->source_bytes) {
    sum.max_source_bytes = std::max(sum.max_source_bytes, b);
  }
  for (uint64_t b : impl_->target_bytes) {
    sum.max_target_bytes = std::max(sum.max_target_bytes, b);
  }
  sum.mean_source_bytes =
      impl_->source_participants.empty()
          ? 0.0
          : static_cast<double>(sum.bytes) / impl_->source_participants.size();
  // The traffic matrix: the parts' sorted pairs merged, equal pairs summed.
  TrafficPairs traffic;
  for (SummaryPart& part : parts) {
    TrafficPairs merged;
    merged.reserve(traffic.size() + part.traffic.size());
    std::merge(traffic.begin(), traffic.end(), part.traffic.begin(),
               part.traffic.end(), std::back_inserter(merged),
               [](const auto& a, const auto& b) { return a.first < b.first; });
    part.traffic = {};
    traffic = std::move(merged);
  }
  for (const auto& [key, bytes] : traffic) {
    const auto sp = static_cast<uint32_t>(key >> 32);
    const auto tp = static_cast<uint32_t>(key & 0xFFFFFFFFu);
    auto& out = impl_->traffic;
    if (!out.empty() && out.back().source_participant == sp &&
        out.back().target_participant == tp) {
      out.back().bytes += bytes;
    } else {
      out.push_back({sp, tp, bytes});
    }
  }
  for (const auto& [key, value] : routes) {
    impl_->routes.push_back(
        {key[0], key[1], key[2], key[3], value.first, value.second});
  }
}

void Planner::SummariseRange(size_t begin, size_t end, const StageIds& source,
                             const StageIds& target,
                             const std::vector<uint32_t>& target_participant,
                             SummaryPart* out) const {
  out->target_bytes.assign(impl_->target_participants.size(), 0);
  out->used.assign(impl_->source_fragments.size(), 0);
  out->traffic.reserve(end - begin);
  uint64_t last_route = UINT64_MAX;
  std::pair<uint64_t, uint64_t>* route = nullptr;
  const auto& regions = impl_->regions;
  for (size_t i = begin; i < end; ++i) {
    if (i + kPrefetchAhead < end) {  // random columns
      const TransferRegion& ahead = regions[i + kPrefetchAhead];
      __builtin_prefetch(&source.of[ahead.source_fragment]);
      __builtin_prefetch(&source_participant_[ahead.source_fragment]);
      __builtin_prefetch(&target.of[ahead.target_fragment]);
      __builtin_prefetch(&target_participant[ahead.target_fragment]);
    }
    const TransferRegion& r = regions[i];
    const uint32_t tp = target_participant[r.target_fragment];
    out->target_bytes[tp] += r.bytes;
    out->traffic.emplace_back(
        (uint64_t{source_participant_[r.source_fragment]} << 32) | tp, r.bytes);
    const uint64_t key = uint64_t{source.of[r.source_fragment]} << 32 |
                         target.of[r.target_fragment];
    if (route == nullptr || key != last_route) {
      route = &out->routes[key];
      last_route = key;
    }
    route->first += 1;
    route->second += r.bytes;
    out->used[r.source_fragment] = 1;
    out->regions += 1;
    out->bytes += r.bytes;
  }
  SumTraffic(&out->traffic);
}

}  // namespace reshard::internal
