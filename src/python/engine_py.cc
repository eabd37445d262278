// Python: engine layouts (python/reshard/engines.py wraps them).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

// (placement, parameter maps as JSON): the maps are plain data that
// engines.py reads once.
py::tuple Layout(py::object config, py::object engine, py::object tp,
                 py::object pp, py::object ep, py::object dp,
                 py::object checkpoint, py::object vocab_multiple,
                 py::object resource_id, py::object revision,
                 py::object generation, py::object quantize,
                 py::object fp8_block, py::object dtype,
                 py::object sequence_parallel_moe) {
  EngineLayoutOptions o;
  o.sequence_parallel_moe = Unwrap(ParseSequenceParallelMoe(
      ToStr(sequence_parallel_moe, "engines.layout.sequence_parallel_moe")));
  o.quantize = ToStr(quantize, "engines.layout.quantize");
  o.block = ToFp8Block(fp8_block, "engines.layout.fp8_block");
  o.dtype = ToStr(dtype, "engines.layout.dtype");
  o.engine = ToStr(engine, "engines.layout.engine");
  o.sizes.tp = ToI64(tp, "engines.layout.tp");
  o.sizes.pp = ToI64(pp, "engines.layout.pp");
  o.sizes.ep = ToI64(ep, "engines.layout.ep");
  o.sizes.dp = ToI64(dp, "engines.layout.dp");
  o.make_vocab_size_divisible_by =
      ToI64(vocab_multiple, "engines.layout.make_vocab_size_divisible_by");
  o.resource_id = ToStr(resource_id, "engines.layout.resource_id");
  o.revision = ToStr(revision, "engines.layout.revision");
  o.weight_generation = ToU64(generation, "engines.layout.generation");
  const std::string text = ToStr(config, "engines.layout.config");
  std::optional<HfCheckpoint> ckpt;
  if (!checkpoint.is_none()) ckpt = checkpoint.cast<HfCheckpoint>();
  Result<EngineLayout> layout = Status::Internal("unset");
  std::string maps;
  {
    py::gil_scoped_release release;
    layout = MakeEngineLayout(text, o, ckpt ? &*ckpt : nullptr);
    if (layout.ok()) maps = EngineParametersToJson(*layout);
  }
  return py::make_tuple(Unwrap(std::move(layout)).placement(), maps);
}

EngineLayout LayoutOf(const WeightPlacementManifest& placement,
                      py::object maps) {
  return Unwrap(EngineParametersFromJson(ToStr(maps, "maps"), placement));
}

// The declaration (DeclaredParameterMapsToJson) of `participants` (every
// one when empty) of the layout.
std::string Declare(const WeightPlacementManifest& placement, py::object maps,
                    std::vector<std::string> participants) {
  const EngineLayout layout = LayoutOf(placement, maps);
  return DeclaredParameterMapsToJson(
      Unwrap(DeclareParameterMaps(layout, participants)));
}

void CheckDeclared(const WeightPlacementManifest& placement, py::object maps,
                   py::object declaration, py::object who) {
  const EngineLayout layout = LayoutOf(placement, maps);
  const auto declared =
      Unwrap(DeclaredParameterMapsFromJson(ToStr(declaration, "declaration")));
  ThrowIfError(CheckDeclaredParameterMaps(layout, declared, ToStr(who, "who")));
}

}  // namespace

Result<std::function<Status(uint32_t, std::string_view)>> TargetMapsCheck(
    const WeightPlacementManifest& placement, const std::string& maps) {
  RESHARD_ASSIGN_OR_RETURN(EngineLayout layout,
                           EngineParametersFromJson(maps, placement));
  return std::function<Status(uint32_t, std::string_view)>(
      [layout](uint32_t rank, std::string_view text) -> Status {
        if (text.empty()) return Status::OK();
        const std::string who = "rank " + std::to_string(rank);
        auto declared = DeclaredParameterMapsFromJson(text);
        if (!declared.ok()) {
          return declared.status().WithContext(who + "'s target declaration");
        }
        return CheckDeclaredParameterMaps(layout, *declared, who);
      });
}

void RegisterEngines(py::module_& m) {
  m.def("engine_layout", &Layout, py::arg("config_json"), py::kw_only(),
        py::arg("engine"), py::arg("tp"), py::arg("pp"), py::arg("ep"),
        py::arg("dp"), py::arg("checkpoint"),
        py::arg("make_vocab_size_divisible_by"), py::arg("resource_id"),
        py::arg("revision"), py::arg("weight_generation"),
        py::arg("quantize") = "", py::arg("fp8_block") = py::none(),
        py::arg("dtype") = "", py::arg("sequence_parallel_moe") = "auto",
        "(placement, parameter maps JSON) of an engine preset.");
  m.def("engine_declare", &Declare, py::arg("placement"), py::arg("maps"),
        py::arg("participants"),
        "The parameter maps' declaration (fingerprints) of the participants "
        "(every one when empty), as JSON.");
  m.def("engine_check_declared", &CheckDeclared, py::arg("placement"),
        py::arg("maps"), py::arg("declaration"), py::arg("who"),
        "Raises unless the declaration agrees with the layout's maps, "
        "naming the first differing parameter.");
  m.def(
      "engine_parameter_map_id",
      [](const WeightPlacementManifest& placement, py::object maps) {
        return EngineParameterMapId(LayoutOf(placement, maps));
      },
      py::arg("placement"), py::arg("maps"));
}

}  // namespace reshard::python
