#include "report/heatmap_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "report/escape.h"

namespace reshard::internal {
namespace {

// Geometry of the drawing, in SVG user units.
struct Frame {
  double cell = 0;  // side of one cell
  double left = 0;  // row labels
  double top = 0;   // column labels
  double width = 0;
  double height = 0;
  size_t rows = 0;
  size_t cols = 0;
};

constexpr double kMatrixSpan = 1024;  // the longer side of the matrix
constexpr double kLegendHeight = 56;

Frame FrameOf(const ReportModel& m) {
  Frame f;
  f.rows = std::max<size_t>(1, m.source.bins.size());
  f.cols = std::max<size_t>(1, m.target.bins.size());
  f.cell = std::clamp(
      kMatrixSpan / static_cast<double>(std::max(f.rows, f.cols)), 2.0, 24.0);
  f.left = 190;
  f.top = 64;
  f.width = f.left + f.cell * static_cast<double>(f.cols) + 16;
  f.height = f.top + f.cell * static_cast<double>(f.rows) + kLegendHeight;
  return f;
}

std::string D(double v) { return ShortDouble(std::round(v * 100) / 100); }

// Runs of consecutive bins with the same major group: (first bin, count).
std::vector<std::pair<size_t, size_t>> MajorSpans(const ReportSide& side) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t b = 0; b < side.bins.size(); ++b) {
    if (!spans.empty() && !side.bins[b].major.empty() &&
        side.bins[spans.back().first].major == side.bins[b].major) {
      ++spans.back().second;
    } else {
      spans.emplace_back(b, 1);
    }
  }
  return spans;
}

// Labels along one axis: every bin when they fit, else one per major group
// that has room.
void AppendLabels(const ReportSide& side, const Frame& f, bool rows,
                  std::string* out) {
  const double along = rows ? f.top : f.left;
  const bool each = f.cell >= 11;
  std::vector<std::pair<size_t, size_t>> spans;
  if (each) {
    for (size_t b = 0; b < side.bins.size(); ++b) spans.emplace_back(b, 1);
  } else {
    spans = MajorSpans(side);
  }
  *out += std::string("<g class=\"") + (rows ? "row" : "col") + "-labels\">";
  double last_end = -1e9;
  for (const auto& [first, count] : spans) {
    const double begin = along + f.cell * static_cast<double>(first);
    const double size = f.cell * static_cast<double>(count);
    const HeatmapBin& bin = side.bins[first];
    std::string text = each || bin.major.empty() ? bin.label : bin.major;
    if (text.size() > 28) text = text.substr(0, 27) + "~";
    const double mid = begin + size / 2;
    const double room = rows ? 10.0 : 7.0 * static_cast<double>(text.size());
    if (mid - room / 2 < last_end) continue;
    last_end = mid + room / 2;
    if (rows) {
      *out += "<text x=\"" + D(f.left - 6) + "\" y=\"" + D(mid + 3.5) +
              "\" text-anchor=\"end\">" + Html(text) + "</text>";
    } else {
      *out += "<text x=\"" + D(mid) + "\" y=\"" + D(f.top - 8) +
              "\" text-anchor=\"middle\">" + Html(text) + "</text>";
    }
  }
  *out += "</g>";
}

// Lines between major groups, drawn over the cells.
void AppendSeparators(const ReportSide& side, const Frame& f, bool rows,
                      std::string* out) {
  const double along = rows ? f.top : f.left;
  *out += "<g class=\"separators\">";
  for (const auto& [first, count] : MajorSpans(side)) {
    if (first == 0) continue;
    const double at = along + f.cell * static_cast<double>(first);
    if (rows) {
      *out += "<line x1=\"" + D(f.left) + "\" x2=\"" +
              D(f.left + f.cell * f.cols) + "\" y1=\"" + D(at) + "\" y2=\"" +
              D(at) + "\"/>";
    } else {
      *out += "<line y1=\"" + D(f.top) + "\" y2=\"" +
              D(f.top + f.cell * f.rows) + "\" x1=\"" + D(at) + "\" x2=\"" +
              D(at) + "\"/>";
    }
  }
  *out += "</g>";
}

void AppendCells(const ReportModel& m, const Frame& f, SvgMode mode,
                 std::string* out) {
  uint64_t lo = UINT64_MAX;
  uint64_t hi = 0;
  for (const HeatmapCell& c : m.cells) {
    lo = std::min(lo, c.bytes);
    hi = std::max(hi, c.bytes);
  }
  const std::string size = D(f.cell);
  *out += "<g class=\"cells\">";
  for (const HeatmapCell& c : m.cells) {
    *out += "<rect class=\"cell\" x=\"" + D(f.left + f.cell * c.col) +
            "\" y=\"" + D(f.top + f.cell * c.row) + "\" width=\"" + size +
            "\" height=\"" + size + "\" fill=\"" + HeatColor(c.bytes, lo, hi) +
            "\" data-s=\"" + std::to_string(c.row) + "\" data-t=\"" +
            std::to_string(c.col) + "\" data-b=\"" + std::to_string(c.bytes) +
            "\" data-r=\"" + std::to_string(c.regions) + "\"";
    if (mode == SvgMode::kStandalone) {
      *out += "><title>" + Html(m.source.bins[c.row].label) + " -> " +
              Html(m.target.bins[c.col].label) + ": " + GroupedDigits(c.bytes) +
              " bytes, " + GroupedDigits(c.regions) + " regions</title></rect>";
    } else {
      *out += "/>";
    }
  }
  *out += "</g>";
}

void AppendLegend(const ReportModel& m, const Frame& f, std::string* out) {
  uint64_t lo = UINT64_MAX;
  uint64_t hi = 0;
  for (const HeatmapCell& c : m.cells) {
    lo = std::min(lo, c.bytes);
    hi = std::max(hi, c.bytes);
  }
  if (m.cells.empty()) lo = hi = 0;
  const double y = f.height - kLegendHeight + 18;
  const double x = f.left;
  *out += "<g class=\"legend\"><defs><linearGradient id=\"heat-scale\">";
  for (int i = 0; i <= 8; ++i) {
    const double t = i / 8.0;
    *out += "<stop offset=\"" + D(t) + "\" stop-color=\"" +
            HeatColor(static_cast<uint64_t>(std::exp(
                          std::log(std::max<uint64_t>(lo, 1)) * (1 - t) +
                          std::log(std::max<uint64_t>(hi, 1)) * t)),
                      std::max<uint64_t>(lo, 1), std::max<uint64_t>(hi, 1)) +
            "\"/>";
  }
  *out += "</linearGradient></defs><rect x=\"" + D(x) + "\" y=\"" + D(y) +
          "\" width=\"240\" height=\"10\" fill=\"url(#heat-scale)\"/>";
  *out += "<text x=\"" + D(x) + "\" y=\"" + D(y + 24) + "\">" + HumanBytes(lo) +
          "</text><text x=\"" + D(x + 240) + "\" y=\"" + D(y + 24) +
          "\" text-anchor=\"end\">" + HumanBytes(hi) + "</text><text x=\"" +
          D(x + 252) + "\" y=\"" + D(y + 9) +
          "\">bytes per cell (log scale); empty: nothing moves</text></g>";
}

}  // namespace

std::string HeatColor(uint64_t bytes, uint64_t min_bytes, uint64_t max_bytes) {
  // Viridis, reversed: light for little traffic, dark for much.
  static constexpr std::array<std::array<int, 3>, 9> kStops = {{
      {253, 231, 37},
      {181, 222, 43},
      {110, 206, 88},
      {53, 183, 121},
      {31, 158, 137},
      {38, 130, 142},
      {49, 104, 142},
      {62, 73, 137},
      {72, 40, 120},
  }};
  double t = 1;
  if (max_bytes > min_bytes && bytes > 0) {
    const double lo =
        std::log(static_cast<double>(std::max<uint64_t>(min_bytes, 1)));
    const double hi = std::log(static_cast<double>(max_bytes));
    t = std::clamp((std::log(static_cast<double>(bytes)) - lo) / (hi - lo), 0.0,
                   1.0);
  }
  const double at = t * (kStops.size() - 1);
  const size_t i = std::min<size_t>(static_cast<size_t>(at), kStops.size() - 2);
  const double frac = at - static_cast<double>(i);
  char buf[8];
  int rgb[3];
  for (int k = 0; k < 3; ++k) {
    rgb[k] = static_cast<int>(
        std::lround(kStops[i][k] * (1 - frac) + kStops[i + 1][k] * frac));
  }
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

void AppendHeatmapSvg(const ReportModel& m, SvgMode mode, std::string* out) {
  const Frame f = FrameOf(m);
  if (mode == SvgMode::kStandalone) {
    *out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  }
  *out +=
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"heatmap-svg\" "
      "viewBox=\"0 0 " +
      D(f.width) + " " + D(f.height) + "\" width=\"" + D(f.width) +
      "\" height=\"" + D(f.height) +
      "\" font-family=\"sans-serif\" font-size=\"11\" "
      "shape-rendering=\"crispEdges\">";
  *out +=
      "<style>.separators line{stroke:#555;stroke-width:0.6}"
      "text{fill:#222}.separators{pointer-events:none}</style>";
  *out += "<rect class=\"matrix\" x=\"" + D(f.left) + "\" y=\"" + D(f.top) +
          "\" width=\"" + D(f.cell * f.cols) + "\" height=\"" +
          D(f.cell * f.rows) + "\" fill=\"#f3f3f3\"/>";
  *out += "<text x=\"" + D(f.left) +
          "\" y=\"16\" font-weight=\"bold\">"
          "Traffic: source participants (rows, " +
          Html(m.source.grouping) + ") -&gt; target participants (columns, " +
          Html(m.target.grouping) + ")</text>";
  AppendLabels(m.source, f, /*rows=*/true, out);
  AppendLabels(m.target, f, /*rows=*/false, out);
  AppendCells(m, f, mode, out);
  AppendSeparators(m.source, f, /*rows=*/true, out);
  AppendSeparators(m.target, f, /*rows=*/false, out);
  AppendLegend(m, f, out);
  *out += "</svg>";
  if (mode == SvgMode::kStandalone) *out += "\n";
}

}  // namespace reshard::internal
