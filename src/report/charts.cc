#include "report/charts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include "report/escape.h"

namespace reshard::internal {
namespace {

std::string D(double v) { return ShortDouble(std::round(v * 100) / 100); }

constexpr double kBarsLeft = 80;
constexpr double kBarsWidth = 1024;
constexpr double kBarsTop = 12;
constexpr double kBarsHeight = 150;

const char* BarColor(uint64_t b, double mean, uint64_t max) {
  if (b == max && static_cast<double>(b) > mean * 1.05) return "#d62728";
  if (static_cast<double>(b) > mean * 1.05) return "#ff7f0e";
  if (b == 0) return "#bbbbbb";
  return "#4e79a7";
}

// Group labels under the bars, one per (dp, pp) group with room for it.
void AppendBarGroups(const ReportSide& side, double bar, std::string* out) {
  *out += "<g class=\"bar-groups\">";
  double last_end = -1e9;
  const double y = kBarsTop + kBarsHeight;
  size_t first = 0;
  for (size_t pos = 1; pos <= side.order.size(); ++pos) {
    const auto major = [&](size_t p) {
      return side.bins[side.bin_of[side.order[p]]].major;
    };
    if (pos < side.order.size() && major(pos) == major(first)) continue;
    const std::string label = major(first);
    const double begin = kBarsLeft + bar * static_cast<double>(first);
    const double end = kBarsLeft + bar * static_cast<double>(pos);
    if (first > 0) {
      *out += "<line x1=\"" + D(begin) + "\" x2=\"" + D(begin) + "\" y1=\"" +
              D(kBarsTop) + "\" y2=\"" + D(y + 4) + "\"/>";
    }
    const double mid = (begin + end) / 2;
    const double room = 6.5 * static_cast<double>(label.size());
    if (!label.empty() && mid - room / 2 >= last_end) {
      *out += "<text x=\"" + D(mid) + "\" y=\"" + D(y + 15) +
              "\" text-anchor=\"middle\">" + Html(label) + "</text>";
      last_end = mid + room / 2 + 4;
    }
    first = pos;
  }
  *out += "</g>";
}

}  // namespace

void AppendLoadBarsSvg(const ReportSide& side,
                       const std::vector<std::string>& ids,
                       const std::vector<uint64_t>& bytes,
                       const std::string& id_attr, std::string* out) {
  const size_t n = side.order.size();
  const uint64_t max =
      n == 0 ? 0 : *std::max_element(bytes.begin(), bytes.end());
  const double mean = n == 0 ? 0
                             : static_cast<double>(std::accumulate(
                                   bytes.begin(), bytes.end(), uint64_t{0})) /
                                   static_cast<double>(n);
  const double bar = kBarsWidth / static_cast<double>(std::max<size_t>(n, 1));
  const double scale = max == 0 ? 0 : kBarsHeight / static_cast<double>(max);
  const double total_height = kBarsTop + kBarsHeight + 24;
  *out += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"load\" id=\"" +
          Html(id_attr) + "\" viewBox=\"0 0 " + D(kBarsLeft + kBarsWidth + 10) +
          " " + D(total_height) +
          "\" font-family=\"sans-serif\" "
          "font-size=\"11\" shape-rendering=\"crispEdges\">";
  *out += "<text x=\"" + D(kBarsLeft - 6) + "\" y=\"" + D(kBarsTop + 8) +
          "\" text-anchor=\"end\">" + HumanBytes(max) + "</text><text x=\"" +
          D(kBarsLeft - 6) + "\" y=\"" + D(kBarsTop + kBarsHeight) +
          "\" text-anchor=\"end\">0</text>";
  *out += "<g class=\"bars\">";
  for (size_t pos = 0; pos < n; ++pos) {
    const uint32_t p = side.order[pos];
    const double h = std::max(1.5, static_cast<double>(bytes[p]) * scale);
    *out += "<rect class=\"bar\" x=\"" + D(kBarsLeft + bar * pos) + "\" y=\"" +
            D(kBarsTop + kBarsHeight - h) + "\" width=\"" +
            D(std::max(bar, 0.5)) + "\" height=\"" + D(h) + "\" fill=\"" +
            BarColor(bytes[p], mean, max) + "\" data-id=\"" + Html(ids[p]) +
            "\" data-b=\"" + std::to_string(bytes[p]) + "\" data-r=\"" +
            std::to_string(side.regions[p]) + "\"/>";
  }
  *out += "</g>";
  AppendBarGroups(side, bar, out);
  const double mean_y = kBarsTop + kBarsHeight - mean * scale;
  *out += "<line class=\"mean\" x1=\"" + D(kBarsLeft) + "\" x2=\"" +
          D(kBarsLeft + kBarsWidth) + "\" y1=\"" + D(mean_y) + "\" y2=\"" +
          D(mean_y) + "\"/><text class=\"mean-label\" x=\"" +
          D(kBarsLeft + kBarsWidth) + "\" y=\"" + D(mean_y - 3) +
          "\" text-anchor=\"end\">mean " +
          HumanBytes(static_cast<uint64_t>(mean + 0.5)) + "</text></svg>";
}

std::string RouteEndLabel(int64_t pp, int64_t stage) {
  if (pp < 0) return "store";
  std::string out = "pp" + std::to_string(pp);
  if (stage >= 0) out += " stage " + std::to_string(stage);
  return out;
}

void AppendRoutesSvg(const std::vector<PipelineRoute>& routes,
                     std::string* out) {
  std::map<std::pair<int64_t, int64_t>, size_t> left, right;
  uint64_t max = 1;
  for (const PipelineRoute& r : routes) {
    left.emplace(std::make_pair(r.source_pp, r.source_stage), 0);
    right.emplace(std::make_pair(r.target_pp, r.target_stage), 0);
    max = std::max(max, r.bytes);
  }
  size_t i = 0;
  for (auto& [key, row] : left) row = i++;
  i = 0;
  for (auto& [key, row] : right) row = i++;
  constexpr double kRow = 30, kTop = 24, kLeftX = 170, kRightX = 690;
  const double height =
      kTop + kRow * static_cast<double>(std::max(left.size(), right.size())) +
      8;
  *out +=
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"routes-svg\" "
      "viewBox=\"0 0 860 " +
      D(height) +
      "\" font-family=\"sans-serif\" "
      "font-size=\"12\"><text x=\"" +
      D(kLeftX) +
      "\" y=\"14\" "
      "text-anchor=\"end\" font-weight=\"bold\">source</text><text x=\"" +
      D(kRightX) + "\" y=\"14\" font-weight=\"bold\">target</text>";
  auto y_of = [&](size_t row) { return kTop + kRow * row + kRow / 2; };
  for (const PipelineRoute& r : routes) {
    const double y1 = y_of(left[{r.source_pp, r.source_stage}]);
    const double y2 = y_of(right[{r.target_pp, r.target_stage}]);
    const double w =
        1.5 + 16.0 * static_cast<double>(r.bytes) / static_cast<double>(max);
    *out += "<path class=\"route\" d=\"M" + D(kLeftX + 8) + " " + D(y1) + " C" +
            D((kLeftX + kRightX) / 2) + " " + D(y1) + " " +
            D((kLeftX + kRightX) / 2) + " " + D(y2) + " " + D(kRightX - 8) +
            " " + D(y2) + "\" stroke-width=\"" + D(w) + "\" data-src=\"" +
            RouteEndLabel(r.source_pp, r.source_stage) + "\" data-dst=\"" +
            RouteEndLabel(r.target_pp, r.target_stage) + "\" data-b=\"" +
            std::to_string(r.bytes) + "\" data-o=\"" +
            std::to_string(r.operations) + "\"/>";
  }
  for (const auto& [key, row] : left) {
    *out += "<text class=\"node\" x=\"" + D(kLeftX) + "\" y=\"" +
            D(y_of(row) + 4) + "\" text-anchor=\"end\">" +
            RouteEndLabel(key.first, key.second) + "</text>";
  }
  for (const auto& [key, row] : right) {
    *out += "<text class=\"node\" x=\"" + D(kRightX) + "\" y=\"" +
            D(y_of(row) + 4) + "\">" + RouteEndLabel(key.first, key.second) +
            "</text>";
  }
  *out += "</svg>";
}

}  // namespace reshard::internal
