// The HTML report and the standalone heatmap (plan_report.h): checks of the
// inputs, the page's static parts (header, sections, tables), the embedded
// data and the Content-Security-Policy that pins the one script.

#include "reshard/plan_report.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "report/charts.h"
#include "report/escape.h"
#include "report/explorer_data.h"
#include "report/heatmap_svg.h"
#include "report/report_assets.h"
#include "report/report_model.h"
#include "util/canonical_json.h"
#include "util/printable.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using internal::GroupedDigits;
using internal::Html;
using internal::HumanBytes;
using internal::ReportModel;
using internal::ShortDouble;

constexpr uint32_t kMaxHeatmapAxis = 4096;

// What the header says about one side's layout.
struct LayoutInfo {
  std::string kind;                    // "placement" or "stored revision"
  std::optional<ParallelSizes> sizes;  // absent for a stored revision
  size_t participants = 0;             // in the topology (payload objects)
  size_t tensors = 0;
  size_t fragments = 0;
  std::string id;
};

LayoutInfo InfoOf(const WeightPlacementManifest& m) {
  return {"placement",        m.topology().sizes(), m.topology().world_size(),
          m.tensors().size(), m.fragments().size(), m.placement_id()};
}

Status CheckLayouts(const LogicalTransferPlan& plan,
                    const PlanReportLayouts& layouts) {
  if (layouts.target == nullptr) {
    return Status::InvalidArgument("plan report: the target layout is missing");
  }
  const bool stored = plan.source_kind() == PlanSourceKind::kStoredManifest;
  const bool given_stored = layouts.stored_source != nullptr;
  if ((layouts.source != nullptr) == given_stored || stored != given_stored) {
    return Status::InvalidArgument(
        std::string("plan report: the plan's source is a ") +
        (stored ? "stored manifest" : "placement") +
        "; pass exactly that source layout");
  }
  const std::string source_id =
      stored ? "manifest:" + layouts.stored_source->manifest_key()
             : layouts.source->placement_id();
  if (source_id != plan.source_placement_id()) {
    return Status::InvalidArgument(
        "plan report: source layout " + internal::Printable(source_id) +
        " is not the plan's source " +
        internal::Printable(plan.source_placement_id()));
  }
  if (layouts.target->placement_id() != plan.target_placement_id()) {
    return Status::InvalidArgument(
        "plan report: target layout " + layouts.target->placement_id() +
        " is not the plan's target " + plan.target_placement_id());
  }
  return Status::OK();
}

Status CheckOptions(const PlanReportOptions& options, bool need_gbps) {
  if (need_gbps && !(std::isfinite(options.gbps) && options.gbps > 0)) {
    return Status::InvalidArgument(
        "plan report: gbps must be a positive finite number, got " +
        (std::isfinite(options.gbps) ? ShortDouble(options.gbps)
         : std::isnan(options.gbps)  ? std::string("nan")
                                     : std::string("inf")));
  }
  if (options.max_heatmap_axis < 1 ||
      options.max_heatmap_axis > kMaxHeatmapAxis) {
    return Status::InvalidArgument("plan report: max_heatmap_axis must be 1.." +
                                   std::to_string(kMaxHeatmapAxis) + ", got " +
                                   std::to_string(options.max_heatmap_axis));
  }
  if (options.max_explorer_items < 1) {
    return Status::InvalidArgument(
        "plan report: max_explorer_items must be at least 1");
  }
  return Status::OK();
}

// The descriptors of the plan's tensors (the target has every one).
std::vector<const TensorDescriptor*> Descriptors(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& target) {
  std::vector<const TensorDescriptor*> out;
  out.reserve(plan.tensors().size());
  for (const std::string& t : plan.tensors())
    out.push_back(target.FindTensor(t));
  return out;
}

// Everything the page computes once.
struct Page {
  const LogicalTransferPlan& plan;
  const PlanReportOptions& options;
  LayoutInfo source;
  LayoutInfo target;
  ReportModel model;
  std::vector<const TensorDescriptor*> descriptors;
  double mean_target_bytes = 0;
  double estimate_seconds = 0;  // the busiest participant at options.gbps
  double serial_seconds = 0;    // every byte through one copy at gbps
  std::string title;
};

Page MakePage(const LogicalTransferPlan& plan, const PlanReportLayouts& layouts,
              const PlanReportOptions& options) {
  Page p{plan, options, {}, InfoOf(*layouts.target), {}, {}, 0, 0, 0, {}};
  if (layouts.source != nullptr) {
    p.source = InfoOf(*layouts.source);
  } else {
    const StoredWeightManifest& s = *layouts.stored_source;
    p.source = {"stored revision",
                std::nullopt,
                plan.source_participants().size(),
                s.tensors().size(),
                s.fragments().size(),
                s.manifest_key()};
  }
  p.model = internal::BuildReportModel(plan, options.max_heatmap_axis);
  p.descriptors = Descriptors(plan, *layouts.target);
  const PlanSummary& s = plan.summary();
  if (!plan.target_participants().empty()) {
    p.mean_target_bytes =
        static_cast<double>(s.bytes) /
        static_cast<double>(plan.target_participants().size());
  }
  if (options.gbps > 0) {
    const double rate = options.gbps * 1e9;
    p.estimate_seconds =
        static_cast<double>(std::max(s.max_source_bytes, s.max_target_bytes)) /
        rate;
    p.serial_seconds = static_cast<double>(s.bytes) / rate;
  }
  p.title = options.title.empty() ? plan.resource_id() + " @ " + plan.revision()
                                  : options.title;
  return p;
}

void Card(const std::string& key, const std::string& label,
          const std::string& value_attr, const std::string& shown,
          const std::string& extra, std::string* out) {
  *out += "<div class=\"card\" data-key=\"" + key + "\" data-value=\"" +
          Html(value_attr) + "\"><div class=\"k\">" + label +
          "</div><div class=\"v\">" + shown + "</div><div class=\"x\">" +
          extra + "</div></div>";
}

void AppendCards(const Page& p, std::string* out) {
  const PlanSummary& s = p.plan.summary();
  const auto u = [](uint64_t v) { return std::to_string(v); };
  const double mean = s.mean_source_bytes;
  *out += "<div class=\"cards\">";
  Card("bytes", "bytes moved", u(s.bytes), HumanBytes(s.bytes),
       GroupedDigits(s.bytes) + " bytes", out);
  Card("regions", "regions", u(s.regions), GroupedDigits(s.regions),
       GroupedDigits(s.operations) + " operations, " +
           GroupedDigits(s.segments) + " segments",
       out);
  Card("max_source_bytes", "max bytes per source participant",
       u(s.max_source_bytes), HumanBytes(s.max_source_bytes),
       GroupedDigits(s.max_source_bytes) + " bytes; " +
           (mean > 0 ? ShortDouble(
                           std::round(s.max_source_bytes / mean * 1000) / 1000)
                     : std::string("0")) +
           "x the mean",
       out);
  const auto rounded_mean = static_cast<uint64_t>(mean + 0.5);
  Card("mean_source_bytes", "mean bytes per source participant",
       u(rounded_mean), HumanBytes(rounded_mean),
       GroupedDigits(rounded_mean) + " bytes over " +
           GroupedDigits(p.plan.source_participants().size()) + " participants",
       out);
  Card("max_target_bytes", "max bytes per target participant",
       u(s.max_target_bytes), HumanBytes(s.max_target_bytes),
       GroupedDigits(s.max_target_bytes) + " bytes", out);
  Card("estimate_seconds", "estimated transfer time",
       ShortDouble(p.estimate_seconds),
       internal::HumanSeconds(p.estimate_seconds),
       "busiest participant at " +
           ShortDouble(std::round(p.options.gbps * 100) / 100) + " GB/s (" +
           Html(p.options.gbps_origin) +
           "); one copy of every "
           "byte: " +
           internal::HumanSeconds(p.serial_seconds),
       out);
  *out += "</div>";
}

void AppendLayoutRow(const std::string& side, const LayoutInfo& l,
                     size_t planned, std::string* out) {
  const auto size = [&](int64_t v) {
    return l.sizes.has_value() ? std::to_string(v) : std::string("-");
  };
  *out += "<tr data-side=\"" + side + "\"><td class=\"l\">" + side +
          "</td><td class=\"l\">" + l.kind + "</td><td>" +
          size(l.sizes ? l.sizes->tp : 0) + "</td><td>" +
          size(l.sizes ? l.sizes->pp : 0) + "</td><td>" +
          size(l.sizes ? l.sizes->ep : 0) + "</td><td>" +
          size(l.sizes ? l.sizes->dp : 0) + "</td><td>" +
          GroupedDigits(l.participants) + "</td><td>" + GroupedDigits(planned) +
          "</td><td>" + GroupedDigits(l.tensors) + "</td><td>" +
          GroupedDigits(l.fragments) + "</td><td class=\"id\">" + Html(l.id) +
          "</td></tr>";
}

void AppendHeader(const Page& p, std::string* out) {
  *out += "<header><h1>reshard plan <span class=\"title\">" + Html(p.title) +
          "</span></h1>";
  AppendCards(p, out);
  *out +=
      "<table class=\"layouts\"><tr><th class=\"l\">side</th>"
      "<th class=\"l\">layout</th><th>TP</th><th>PP</th><th>EP</th>"
      "<th>DP</th><th>participants</th><th>in the plan</th>"
      "<th>tensors</th><th>fragments</th><th class=\"l\">id</th></tr>";
  AppendLayoutRow("source", p.source, p.plan.source_participants().size(), out);
  AppendLayoutRow("target", p.target, p.plan.target_participants().size(), out);
  *out +=
      "</table></header><nav><a href=\"#traffic\">traffic</a>"
      "<a href=\"#load\">load</a><a href=\"#explorer\">tensors</a>"
      "<a href=\"#routes\">pipeline routes</a></nav>";
}

void AppendTraffic(const Page& p, std::string* out) {
  const auto& m = p.model;
  *out +=
      "<section id=\"traffic\"><h2>Traffic matrix</h2><p class=\"note\">"
      "Bytes each source participant (row) sends to each target "
      "participant (column), participants in rank order (dp, pp, ep, "
      "tp); lines separate (dp, pp) groups. " +
      GroupedDigits(m.source.order.size()) + " x " +
      GroupedDigits(m.target.order.size()) + " participants shown as " +
      GroupedDigits(m.source.bins.size()) + " x " +
      GroupedDigits(m.target.bins.size()) +
      " cells (rows: " + Html(m.source.grouping) +
      ", columns: " + Html(m.target.grouping) + "); " +
      GroupedDigits(m.cells.size()) +
      " non-empty. Hover a cell for exact bytes and regions.</p>"
      "<div class=\"scroll\">";
  internal::AppendHeatmapSvg(m, internal::SvgMode::kInline, out);
  *out += "</div></section>";
}

void AppendLoadStats(const std::string& side, const std::string& verb,
                     const std::vector<std::string>& ids,
                     const std::vector<uint64_t>& bytes, std::string* out) {
  if (ids.empty()) return;
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  const double mean =
      static_cast<double>(sum) / static_cast<double>(ids.size());
  const std::string ratio =
      mean > 0 ? ShortDouble(std::round(*hi / mean * 1000) / 1000) : "0";
  *out += "<p class=\"stats\" id=\"stats-" + side + "\">" +
          GroupedDigits(ids.size()) + " " + side + " participants " + verb +
          ": max <b>" + HumanBytes(*hi) + "</b> (" +
          Html(ids[static_cast<size_t>(hi - bytes.begin())]) + "), mean <b>" +
          HumanBytes(static_cast<uint64_t>(mean + 0.5)) + "</b>, min <b>" +
          HumanBytes(*lo) + "</b>; max / mean = <b data-ratio=\"" + ratio +
          "\">" + ratio + "</b></p>";
}

void AppendLoad(const Page& p, std::string* out) {
  *out +=
      "<section id=\"load\"><h2>Load per participant</h2><p class=\"note\">"
      "One bar per participant in rank order; dashed: the mean. Orange: "
      "more than 5% above the mean, red: the largest. Grey stubs: "
      "participants that hold fragments but serve nothing (replicas not "
      "chosen).</p><h3>bytes served (source)</h3>";
  AppendLoadStats("source", "serve", p.plan.source_participants(),
                  p.plan.source_bytes(), out);
  internal::AppendLoadBarsSvg(p.model.source, p.plan.source_participants(),
                              p.plan.source_bytes(), "load-source", out);
  *out += "<h3>bytes received (target)</h3>";
  AppendLoadStats("target", "receive", p.plan.target_participants(),
                  p.plan.target_bytes(), out);
  internal::AppendLoadBarsSvg(p.model.target, p.plan.target_participants(),
                              p.plan.target_bytes(), "load-target", out);
  *out += "</section>";
}

void AppendExplorer(std::string* out) {
  *out +=
      "<section id=\"explorer\"><h2>Tensor explorer</h2><p class=\"note\">"
      "Pick a tensor: its global shape with the source fragments, the target "
      "fragments and the regions between them, projected on two dimensions "
      "(the split ones by default). Hover a box to see what it feeds or is "
      "fed by; click one to list only its regions.</p>"
      "<div class=\"explorer-controls\"><div><input id=\"tx-filter\" "
      "type=\"search\" placeholder=\"filter tensors by name\">"
      "<select id=\"tx-list\" size=\"12\"></select><div class=\"note\">"
      "<span id=\"tx-count\"></span>; sort by <select id=\"tx-sort\">"
      "<option value=\"bytes\">bytes</option><option value=\"name\">name"
      "</option></select></div></div><div><div id=\"tx-info\"></div>"
      "<p>x: <select id=\"tx-dimx\"></select> y: <select id=\"tx-dimy\">"
      "</select></p></div></div><div class=\"panels\">"
      "<div class=\"panel\"><h3>source fragments</h3><svg id=\"tx-source\">"
      "</svg></div><div class=\"panel\"><h3>target fragments</h3>"
      "<svg id=\"tx-target\"></svg></div><div class=\"panel\"><h3>regions"
      "</h3><svg id=\"tx-regions\"></svg></div></div><p class=\"note\">"
      "<span id=\"tx-table-note\"></span> <button id=\"tx-all\" "
      "type=\"button\">show all</button></p><div class=\"table-scroll\"><table "
      "id=\"tx-table\"></table></div>"
      "</section>";
}

void AppendRoutes(const Page& p, std::string* out) {
  std::vector<PipelineRoute> routes = p.plan.pipeline_routes();
  *out +=
      "<section id=\"routes\"><h2>Pipeline routes</h2><p class=\"note\">"
      "Bytes from each source pipeline stage to each target stage "
      "(line width grows with bytes).</p>";
  internal::AppendRoutesSvg(routes, out);
  std::stable_sort(routes.begin(), routes.end(),
                   [](const PipelineRoute& a, const PipelineRoute& b) {
                     return a.bytes > b.bytes;
                   });
  *out +=
      "<table id=\"routes-table\"><tr><th class=\"l\">source</th>"
      "<th class=\"l\">target</th><th>bytes</th><th>operations</th></tr>";
  for (const PipelineRoute& r : routes) {
    *out += "<tr data-b=\"" + std::to_string(r.bytes) + "\"><td class=\"l\">" +
            internal::RouteEndLabel(r.source_pp, r.source_stage) +
            "</td><td class=\"l\">" +
            internal::RouteEndLabel(r.target_pp, r.target_stage) + "</td><td>" +
            GroupedDigits(r.bytes) + "</td><td>" + GroupedDigits(r.operations) +
            "</td></tr>";
  }
  *out += "</table></section>";
}

void WriteParticipants(const internal::ReportSide& side,
                       const std::vector<std::string>& ids,
                       const std::vector<uint64_t>& bytes,
                       internal::CanonicalJsonWriter* w) {
  w->BeginObject();
  w->Key("bytes");
  w->BeginArray();
  for (uint32_t p : side.order) w->UInt(bytes[p]);
  w->EndArray();
  w->Key("ids");
  w->BeginArray();
  for (uint32_t p : side.order) w->String(ids[p]);
  w->EndArray();
  w->Key("regions");
  w->BeginArray();
  for (uint32_t p : side.order) w->UInt(side.regions[p]);
  w->EndArray();
  w->EndObject();
}

void WriteBins(const internal::ReportSide& side,
               internal::CanonicalJsonWriter* w) {
  w->BeginArray();
  for (const auto& bin : side.bins) {
    w->BeginArray();
    w->UInt(bin.first);
    w->UInt(bin.count);
    w->String(bin.label);
    w->EndArray();
  }
  w->EndArray();
}

void WriteSummary(const Page& p, internal::CanonicalJsonWriter* w) {
  const PlanSummary& s = p.plan.summary();
  w->BeginObject();
  w->KeyUInt("bytes", s.bytes);
  w->Key("estimate_seconds");
  w->Raw(ShortDouble(p.estimate_seconds));
  w->Key("gbps");
  w->Raw(ShortDouble(p.options.gbps));
  w->KeyUInt("max_source_bytes", s.max_source_bytes);
  w->KeyUInt("max_target_bytes", s.max_target_bytes);
  w->Key("mean_source_bytes");
  w->Raw(ShortDouble(s.mean_source_bytes));
  w->Key("mean_target_bytes");
  w->Raw(ShortDouble(p.mean_target_bytes));
  w->KeyUInt("operations", s.operations);
  w->KeyUInt("regions", s.regions);
  w->KeyUInt("segments", s.segments);
  w->Key("serial_seconds");
  w->Raw(ShortDouble(p.serial_seconds));
  w->EndObject();
}

// The page's data (#plan-data), keys in canonical order.
std::string DataJson(const Page& p) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("bins");
  w.BeginObject();
  w.Key("source");
  WriteBins(p.model.source, &w);
  w.Key("target");
  WriteBins(p.model.target, &w);
  w.EndObject();
  w.Key("explorer");
  internal::WriteExplorerData(p.plan, p.model, p.descriptors,
                              p.options.max_explorer_items, &w);
  w.Key("participants");
  w.BeginObject();
  w.Key("source");
  WriteParticipants(p.model.source, p.plan.source_participants(),
                    p.plan.source_bytes(), &w);
  w.Key("target");
  WriteParticipants(p.model.target, p.plan.target_participants(),
                    p.plan.target_bytes(), &w);
  w.EndObject();
  w.Key("summary");
  WriteSummary(p, &w);
  w.KeyUInt("version", 1);
  w.EndObject();
  return internal::ScriptSafeJson(out);
}

// "'sha256-<base64>'": the CSP source that admits exactly `script`.
std::string ScriptHashSource(std::string_view script) {
  internal::Sha256 h;
  h.Update(script);
  const std::array<uint8_t, 32> digest = h.Finish();
  unsigned char b64[48];
  const int n = EVP_EncodeBlock(b64, digest.data(), digest.size());
  return "'sha256-" + std::string(reinterpret_cast<char*>(b64), n) + "'";
}

}  // namespace

Result<std::string> RenderPlanReportHtml(const LogicalTransferPlan& plan,
                                         const PlanReportLayouts& layouts,
                                         const PlanReportOptions& options) {
  RESHARD_RETURN_NOT_OK(CheckLayouts(plan, layouts));
  RESHARD_RETURN_NOT_OK(CheckOptions(options, /*need_gbps=*/true));
  const Page p = MakePage(plan, layouts, options);
  std::string out;
  out +=
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
      "'none'; script-src " +
      ScriptHashSource(internal::kReportJs) +
      "; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">"
      "<meta name=\"viewport\" content=\"width=device-width, "
      "initial-scale=1\"><meta name=\"generator\" content=\"reshard plan "
      "--html\"><title>reshard plan: " +
      Html(p.title) + "</title><style>";
  out += internal::kReportCss;
  out += "</style></head><body>";
  AppendHeader(p, &out);
  AppendTraffic(p, &out);
  AppendLoad(p, &out);
  AppendExplorer(&out);
  AppendRoutes(p, &out);
  out += "<footer>source " + Html(plan.source_placement_id()) +
         " -&gt; target " + Html(plan.target_placement_id()) +
         "; self-contained: no network access.</footer>"
         "<div id=\"tip\" role=\"tooltip\" hidden></div>"
         "<script type=\"application/json\" id=\"plan-data\">";
  out += DataJson(p);
  out += "</script><script>";
  out += internal::kReportJs;
  out += "</script></body></html>\n";
  return out;
}

Result<std::string> RenderTrafficHeatmapSvg(const LogicalTransferPlan& plan,
                                            const PlanReportLayouts& layouts,
                                            const PlanReportOptions& options) {
  RESHARD_RETURN_NOT_OK(CheckLayouts(plan, layouts));
  RESHARD_RETURN_NOT_OK(CheckOptions(options, /*need_gbps=*/false));
  std::string out;
  internal::AppendHeatmapSvg(
      internal::BuildReportModel(plan, options.max_heatmap_axis),
      internal::SvgMode::kStandalone, &out);
  return out;
}

double MeasureMemcpyGbps(std::chrono::milliseconds budget) {
  constexpr size_t kBytes = size_t{32} << 20;
  std::vector<uint8_t> from(kBytes, 0x5A);
  std::vector<uint8_t> to(kBytes, 0);  // both touched before timing
  const auto start = std::chrono::steady_clock::now();
  double best = 1e30;
  for (int rep = 0; rep < 64; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    if (t1 - start >= budget) break;
  }
  // Keep the copies observable.
  volatile uint8_t sink = to[kBytes / 2];
  (void)sink;
  return static_cast<double>(kBytes) / std::max(best, 1e-9) / 1e9;
}

}  // namespace reshard
