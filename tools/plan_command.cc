// `reshard plan SOURCE.json TARGET.json [--target-participant ID] [--json]
//  [--html OUT.html] [--svg OUT.svg] [--gbps GBPS]`.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <limits>
#include <optional>

#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/plan_report.h"
#include "reshard/stored_manifest.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/printable.h"

namespace reshard::cli {
namespace {

std::string Bytes(uint64_t b) {
  char buf[64];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// The `count` most loaded participants, as "id (bytes)".
std::string Top(const std::vector<std::string>& ids,
                const std::vector<uint64_t>& bytes, size_t count) {
  std::vector<size_t> order(ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::string out;
  for (size_t i = 0; i < std::min(count, order.size()); ++i) {
    out += "    " + internal::Printable(ids[order[i]]) + "  " +
           Bytes(bytes[order[i]]) + "\n";
  }
  return out;
}

// The human summary of a plan planned in `seconds`.
std::string HumanSummary(const LogicalTransferPlan& plan, double seconds) {
  const PlanSummary& s = plan.summary();
  char line[512];
  std::string out;
  std::snprintf(line, sizeof(line),
                "plan: %zu tensors, %zu source fragments -> %zu target "
                "fragments (%.3f s)\n",
                plan.tensors().size(), plan.source_fragments().size(),
                plan.target_fragments().size(), seconds);
  out += line;
  std::snprintf(line, sizeof(line),
                "  regions %llu  operations %llu  segments %llu  bytes %s\n",
                static_cast<unsigned long long>(s.regions),
                static_cast<unsigned long long>(s.operations),
                static_cast<unsigned long long>(s.segments),
                Bytes(s.bytes).c_str());
  out += line;
  std::snprintf(line, sizeof(line),
                "  source load: max %s, mean %s over %zu participants\n",
                Bytes(s.max_source_bytes).c_str(),
                Bytes(static_cast<uint64_t>(s.mean_source_bytes)).c_str(),
                plan.source_participants().size());
  out += line;
  out += "  most loaded sources:\n" +
         Top(plan.source_participants(), plan.source_bytes(), 3);
  out += "  most loaded targets:\n" +
         Top(plan.target_participants(), plan.target_bytes(), 3);
  return out;
}

struct PlanArgs {
  std::string source;
  std::string target;
  std::string participant;
  bool json = false;
  std::string html;
  std::string svg;
  std::optional<std::string> gbps;  // as given: RunPlan checks it
  uint32_t heatmap_max_axis = PlanReportOptions{}.max_heatmap_axis;
  bool convert = false;
  Fp8Block block;
};

// The --html and --svg files of `plan`; the human output names them.
Status WriteReports(const PlanArgs& a, const LogicalTransferPlan& plan,
                    const PlanReportLayouts& layouts, std::string* note) {
  PlanReportOptions options;
  options.max_heatmap_axis = a.heatmap_max_axis;
  if (!a.svg.empty()) {
    auto svg = RenderTrafficHeatmapSvg(plan, layouts, options);
    if (!svg.ok()) return svg.status().WithContext("--svg");
    RESHARD_RETURN_NOT_OK(WriteOutput("--svg", a.svg, *svg));
    *note += "  heatmap: " + internal::Printable(a.svg) + "\n";
  }
  if (a.html.empty()) return Status::OK();
  if (a.gbps.has_value()) {
    options.gbps = ParseFiniteNumber(*a.gbps).value();
  } else {
    options.gbps = MeasureMemcpyGbps();
    options.gbps_origin = "memcpy measured on this host";
  }
  auto html = RenderPlanReportHtml(plan, layouts, options);
  if (!html.ok()) return html.status().WithContext("--html");
  RESHARD_RETURN_NOT_OK(WriteOutput("--html", a.html, *html));
  *note += "  report: " + internal::Printable(a.html) + " (" +
           Bytes(html->size()) + ")\n";
  return Status::OK();
}

Result<std::string> RunPlan(const PlanArgs& a) {
  if (a.gbps.has_value()) {
    RESHARD_RETURN_NOT_OK(NumberFlag("--gbps", *a.gbps,
                                     std::numeric_limits<double>::denorm_min(),
                                     std::numeric_limits<double>::max(),
                                     "a positive finite number of GB/s")
                              .status());
  }
  // The target is read and decoded on a second core while the source is
  // here (both are CPU-bound); a source that cannot be read fails first,
  // else the target's error comes first.
  auto target =
      std::async(std::launch::async, [&a] { return LoadPlacement(a.target); });
  RESHARD_ASSIGN_OR_RETURN(InputText source_input,
                           InputText::Open(a.source, InputKind::kPlacement));
  const std::string_view source_text = source_input.text();
  PlanOptions options;
  if (!a.participant.empty()) options.target_participant_id = a.participant;
  options.convert = a.convert;
  options.fp8_block = a.block;
  // The source is a live placement or a stored manifest. A placement is
  // tried first: the canonical ones every writer emits decode straight from
  // their bytes, where a look for manifest_key would parse the whole
  // document into a DOM first (a second copy and tape of a 73 MB input).
  std::optional<WeightPlacementManifest> src;
  std::optional<StoredWeightManifest> stored;
  Status source_status;
  auto placement = DecodePlacement(source_input);
  if (placement.ok()) {
    src = std::move(placement).ValueOrDie();
  } else if (LooksLikeStoredManifest(source_text)) {
    auto m = StoredWeightManifestFromJson(source_text);
    if (m.ok()) {
      stored = std::move(m).ValueOrDie();
    } else {
      source_status = m.status().WithContext(a.source);
    }
  } else {
    source_status = placement.status().WithContext(a.source);
  }
  // The decoded manifests own everything they need: the source's text
  // goes before the target's decode ends and planning begins.
  source_input = InputText();
  RESHARD_ASSIGN_OR_RETURN(auto dst, target.get());
  RESHARD_RETURN_NOT_OK(source_status);
  const auto t0 = std::chrono::steady_clock::now();
  RESHARD_ASSIGN_OR_RETURN(
      auto plan,
      stored.has_value()
          ? LogicalTransferPlan::MakeFromStored(*stored, dst, options)
          : LogicalTransferPlan::Make(*src, dst, options));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::string note;
  RESHARD_RETURN_NOT_OK(WriteReports(a, plan,
                                     stored.has_value()
                                         ? PlanReportLayouts::Of(*stored, dst)
                                         : PlanReportLayouts::Of(*src, dst),
                                     &note));
  std::string out = a.json ? PlanSummaryToJson(plan) + "\n"
                           : HumanSummary(plan, seconds) + note;
  KeepUntilExit(std::move(plan));
  KeepUntilExit(std::move(dst));
  KeepUntilExit(std::move(src));
  KeepUntilExit(std::move(stored));
  return out;
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Plan a reshard from a source to a target placement");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("SOURCE", a->source, "source placement (JSON)")->required();
  cmd->add_option("TARGET", a->target, "target placement (JSON)")->required();
  cmd->add_option("--target-participant,--target-participant-id",
                  a->participant,
                  "plan only this target participant's fragments "
                  "(--target-participant-id: the library's name)");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_option("--html", a->html,
                  "write a self-contained HTML report of the plan");
  cmd->add_option("--svg", a->svg, "write the traffic heatmap as SVG");
  cmd->add_option("--gbps", a->gbps,
                  "bandwidth (GB/s) of the report's estimated transfer time "
                  "(default: this host's memcpy, measured)");
  cmd->add_option("--heatmap-max-axis", a->heatmap_max_axis,
                  "heatmap rows and columns at most; more participants are "
                  "grouped by rank (default 512)");
  cmd->add_flag("--convert", a->convert,
                "convert tensors whose dtype differs (docs/conversion.md)");
  AddBlockOption(cmd, &a->block);
  cmd->callback([a]() {
    auto result = RunPlan(*a);
    if (!result.ok()) throw CLI::RuntimeError(Fail(result.status()));
    std::cout << *result;
  });
}

}  // namespace reshard::cli
