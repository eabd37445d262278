// `reshard validate` and `reshard canonicalize`.

#include <iostream>

#include "reshard/binding.h"
#include "reshard/json.h"
#include "reshard/placement.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/canonical_json.h"

namespace reshard::cli {

void AddValidateCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "validate", "Validate a placement (and optional runtime bindings)");
  auto placement = std::make_shared<std::string>();
  auto bindings = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("PLACEMENT", *placement, "placement manifest (JSON)")
      ->required();
  cmd->add_option("--binding", *bindings,
                  "runtime binding manifest (JSON); repeatable");
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->callback([=]() {
    auto run = [&]() -> Result<std::string> {
      RESHARD_ASSIGN_OR_RETURN(auto manifest, LoadPlacement(*placement));
      std::vector<WeightRuntimeBindingManifest> parsed;
      for (const auto& path : *bindings) {
        RESHARD_ASSIGN_OR_RETURN(std::string btext,
                                 ReadFile(path, InputKind::kPlacement));
        auto b = WeightRuntimeBindingFromJson(btext);
        if (!b.ok()) return b.status().WithContext(path);
        parsed.push_back(std::move(b).ValueOrDie());
      }
      if (!parsed.empty()) {
        RESHARD_RETURN_NOT_OK(
            ValidateRuntimeBindings(manifest, parsed, BindingCoverage::kSubset)
                .WithContext("bindings"));
      }
      const auto& m = manifest;
      std::string out;
      if (*json) {
        // The placement's summary fields (VisitFields, placement.h) with
        // "bindings" and "valid", keys sorted.
        out = RecordJson(
            m, {}, {{"bindings", uint64_t{parsed.size()}}, {"valid", true}});
        out += '\n';
      } else {
        out += "placement_id: " + m.placement_id() + "\n";
        out += "digest:       " + m.digest() + "\n";
        out += "topology_id:  " + m.topology().topology_id() + "\n";
        out += "tensors: " + std::to_string(m.tensors().size()) +
               "  fragments: " + std::to_string(m.fragments().size()) +
               "  participants: " +
               std::to_string(m.topology().participants().size()) + "\n";
        if (!parsed.empty()) {
          out += "bindings: " + std::to_string(parsed.size()) + " valid\n";
        }
      }
      KeepUntilExit(std::move(manifest));
      return out;
    };
    auto result = run();
    if (!result.ok()) {
      if (*json) {
        std::string out;
        internal::CanonicalJsonWriter w(&out);
        w.BeginObject();
        w.KeyString("error", result.status().message());
        w.Key("valid");
        w.Bool(false);
        w.EndObject();
        std::cout << out << "\n";
      }
      throw CLI::RuntimeError(Fail(result.status()));
    }
    std::cout << *result;
  });
}

void AddCanonicalizeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("canonicalize",
                                 "Print the canonical JSON form of a file");
  auto file = std::make_shared<std::string>();
  auto utf8 = std::make_shared<bool>(false);
  cmd->add_option("FILE", *file, "JSON file ('-' for stdin)")->required();
  cmd->add_flag("--utf8", *utf8,
                "write non-ASCII as raw UTF-8 (ensure_ascii=False)");
  cmd->callback([=]() {
    auto text = ReadFile(*file, InputKind::kPlacement);
    if (!text.ok()) throw CLI::RuntimeError(Fail(text.status()));
    auto out = CanonicalizeJson(
        *text, *utf8 ? JsonAscii::kRawUtf8 : JsonAscii::kEscapeNonAscii);
    if (!out.ok()) {
      throw CLI::RuntimeError(Fail(out.status().WithContext(*file)));
    }
    std::cout << *out << "\n";
  });
}

}  // namespace reshard::cli
