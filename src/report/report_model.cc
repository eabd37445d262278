#include "report/report_model.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <unordered_map>

namespace reshard::internal {
namespace {

// (dp, pp, ep, tp): the planner's rank order, outermost first.
using RankKey = std::array<int64_t, 4>;

RankKey KeyOf(const ParallelRank& r) { return {r.dp, r.pp, r.ep, r.tp}; }

// "dp0 pp1 ep3" for the first `depth` coordinates of the key.
std::string PrefixLabel(const RankKey& key, size_t depth) {
  static const char* const kNames[] = {"dp", "pp", "ep", "tp"};
  std::string out;
  for (size_t i = 0; i < depth; ++i) {
    if (i > 0) out.push_back(' ');
    out += kNames[i] + std::to_string(key[i]);
  }
  return out;
}

bool SamePrefix(const RankKey& a, const RankKey& b, size_t depth) {
  return std::equal(a.begin(), a.begin() + depth, b.begin());
}

// Bins of participants sharing the first `depth` rank coordinates (depth 4:
// one bin per participant).
std::vector<HeatmapBin> PrefixBins(const ReportSide& side,
                                   const std::vector<std::string>& ids,
                                   size_t depth) {
  std::vector<HeatmapBin> bins;
  for (uint32_t pos = 0; pos < side.order.size(); ++pos) {
    const RankKey key = KeyOf(side.ranks[side.order[pos]]);
    const bool same =
        depth < 4 && !bins.empty() &&
        SamePrefix(KeyOf(side.ranks[side.order[bins.back().first]]), key,
                   depth);
    if (same) {
      ++bins.back().count;
      continue;
    }
    HeatmapBin bin;
    bin.first = pos;
    bin.count = 1;
    bin.label = depth == 4 ? ids[side.order[pos]] : PrefixLabel(key, depth);
    if (side.ranked) bin.major = PrefixLabel(key, std::min<size_t>(depth, 2));
    bins.push_back(std::move(bin));
  }
  return bins;
}

// Runs of `per` consecutive participants.
std::vector<HeatmapBin> RunBins(const ReportSide& side,
                                const std::vector<std::string>& ids,
                                uint32_t per) {
  std::vector<HeatmapBin> bins;
  const auto n = static_cast<uint32_t>(side.order.size());
  for (uint32_t first = 0; first < n; first += per) {
    HeatmapBin bin;
    bin.first = first;
    bin.count = std::min(per, n - first);
    bin.label = ids[side.order[first]] + " .. " +
                ids[side.order[first + bin.count - 1]];
    bins.push_back(std::move(bin));
  }
  return bins;
}

// The finest grouping with at most `max_axis` bins.
void GroupSide(const std::vector<std::string>& ids, uint32_t max_axis,
               ReportSide* side) {
  const size_t n = side->order.size();
  if (n <= max_axis) {
    side->bins = PrefixBins(*side, ids, 4);
    side->grouping = "participant";
  } else {
    static const char* const kGroupings[] = {"dp", "dp,pp", "dp,pp,ep"};
    for (size_t depth = 3; side->ranked && depth >= 1; --depth) {
      auto bins = PrefixBins(*side, ids, depth);
      if (bins.size() <= max_axis) {
        side->bins = std::move(bins);
        side->grouping = kGroupings[depth - 1];
        break;
      }
    }
    if (side->bins.empty()) {
      const auto per = static_cast<uint32_t>((n + max_axis - 1) / max_axis);
      side->bins = RunBins(*side, ids, per);
      side->grouping = "run of " + std::to_string(per);
    }
  }
  side->bin_of.assign(n, 0);
  for (uint32_t b = 0; b < side->bins.size(); ++b) {
    const HeatmapBin& bin = side->bins[b];
    for (uint32_t pos = bin.first; pos < bin.first + bin.count; ++pos) {
      side->bin_of[side->order[pos]] = b;
    }
  }
}

ReportSide BuildSide(const std::vector<std::string>& ids,
                     const std::vector<PlanFragment>& fragments, bool ranked,
                     uint32_t max_axis) {
  ReportSide side;
  side.ranked = ranked;
  const size_t n = ids.size();
  side.ranks.assign(n, ParallelRank{});
  side.regions.assign(n, 0);
  std::vector<bool> seen(n, false);
  for (const PlanFragment& f : fragments) {
    if (!seen[f.participant]) {
      side.ranks[f.participant] = f.rank;
      seen[f.participant] = true;
    }
  }
  side.order.resize(n);
  std::iota(side.order.begin(), side.order.end(), 0);
  // Ids are sorted already, so a stable sort by rank breaks ties by id.
  std::stable_sort(side.order.begin(), side.order.end(),
                   [&](uint32_t a, uint32_t b) {
                     return KeyOf(side.ranks[a]) < KeyOf(side.ranks[b]);
                   });
  side.position.assign(n, 0);
  for (uint32_t pos = 0; pos < n; ++pos) side.position[side.order[pos]] = pos;
  GroupSide(ids, max_axis, &side);
  return side;
}

}  // namespace

ReportModel BuildReportModel(const LogicalTransferPlan& plan,
                             uint32_t max_axis) {
  ReportModel m;
  m.source =
      BuildSide(plan.source_participants(), plan.source_fragments(),
                plan.source_kind() == PlanSourceKind::kPlacement, max_axis);
  m.target = BuildSide(plan.target_participants(), plan.target_fragments(),
                       /*ranked=*/true, max_axis);
  const uint64_t cols = m.target.bins.size();
  std::unordered_map<uint64_t, size_t> cell_of;
  for (const TransferRegion& r : plan.regions()) {
    const uint32_t s = plan.source_fragments()[r.source_fragment].participant;
    const uint32_t t = plan.target_fragments()[r.target_fragment].participant;
    ++m.source.regions[s];
    ++m.target.regions[t];
    const uint32_t row = m.source.bin_of[s];
    const uint32_t col = m.target.bin_of[t];
    auto [it, inserted] = cell_of.try_emplace(row * cols + col, m.cells.size());
    if (inserted) m.cells.push_back({row, col, 0, 0});
    HeatmapCell& cell = m.cells[it->second];
    cell.bytes += r.bytes;
    ++cell.regions;
  }
  std::sort(m.cells.begin(), m.cells.end(),
            [](const HeatmapCell& a, const HeatmapCell& b) {
              return std::tie(a.row, a.col) < std::tie(b.row, b.col);
            });
  return m;
}

}  // namespace reshard::internal
