// Python: engine layouts (python/reshard/engines.py wraps them).

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

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
                 py::object fp8_block, py::object dtype) {
  EngineLayoutOptions o;
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

}  // namespace

void RegisterEngines(py::module_& m) {
  m.def("engine_layout", &Layout, py::arg("config_json"), py::kw_only(),
        py::arg("engine"), py::arg("tp"), py::arg("pp"), py::arg("ep"),
        py::arg("dp"), py::arg("checkpoint"),
        py::arg("make_vocab_size_divisible_by"), py::arg("resource_id"),
        py::arg("revision"), py::arg("weight_generation"),
        py::arg("quantize") = "", py::arg("fp8_block") = py::none(),
        py::arg("dtype") = "",
        "(placement, parameter maps JSON) of an engine preset.");
}

}  // namespace reshard::python
