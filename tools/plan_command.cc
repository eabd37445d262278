// `reshard plan SOURCE.json TARGET.json [--target-participant ID] [--json]`.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "reshard/placement.h"
#include "reshard/plan.h"
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

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Plan a reshard from a source to a target placement");
  auto source = std::make_shared<std::string>();
  auto target = std::make_shared<std::string>();
  auto participant = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("SOURCE", *source, "source placement (JSON)")->required();
  cmd->add_option("TARGET", *target, "target placement (JSON)")->required();
  cmd->add_option("--target-participant", *participant,
                  "plan only this target participant's fragments");
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->callback([=]() {
    auto run = [&]() -> Result<std::string> {
      RESHARD_ASSIGN_OR_RETURN(std::string source_text, ReadFile(*source));
      RESHARD_ASSIGN_OR_RETURN(auto dst, LoadPlacement(*target));
      PlanOptions options;
      if (!participant->empty()) options.target_participant_id = *participant;
      // The source is a live placement or a stored manifest.
      std::optional<WeightPlacementManifest> src;
      std::optional<StoredWeightManifest> stored;
      if (LooksLikeStoredManifest(source_text)) {
        auto m = StoredWeightManifestFromJson(source_text);
        if (!m.ok()) return m.status().WithContext(*source);
        stored = std::move(m).ValueOrDie();
      } else {
        auto m = WeightPlacementFromJson(source_text);
        if (!m.ok()) return m.status().WithContext(*source);
        src = std::move(m).ValueOrDie();
      }
      const auto t0 = std::chrono::steady_clock::now();
      RESHARD_ASSIGN_OR_RETURN(
          auto plan,
          stored.has_value()
              ? LogicalTransferPlan::MakeFromStored(*stored, dst, options)
              : LogicalTransferPlan::Make(*src, dst, options));
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (*json) return PlanSummaryToJson(plan) + "\n";
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
                    "  regions %llu  operations %llu  segments %llu  bytes "
                    "%s\n",
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
    };
    auto result = run();
    if (!result.ok()) throw CLI::RuntimeError(Fail(result.status()));
    std::cout << *result;
  });
}

}  // namespace reshard::cli
