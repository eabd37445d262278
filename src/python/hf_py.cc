// Hugging Face checkpoints (hf.h): open a checkpoint, lay a model out from
// its config.json, load any placement's buffers from the checkpoint, write
// a placement's buffers back as a checkpoint.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "reshard/hf.h"
#include "src/python/buffers.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/progress.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

py::dict TensorDict(const CheckpointTensor& t) {
  py::dict d;
  d["name"] = t.name;
  d["file"] = t.file;
  d["dtype"] = t.dtype;
  d["itemsize"] = t.itemsize;
  d["shape"] = DimsTuple(t.shape);
  d["offset"] = t.offset;
  d["nbytes"] = t.nbytes;
  return d;
}

py::list Files(const HfCheckpoint& c) {
  py::list out;
  for (const CheckpointFile& f : c.files()) {
    py::dict d;
    d["name"] = f.name;
    d["size"] = f.size;
    d["header_bytes"] = f.header_bytes;
    d["metadata"] = f.metadata;
    out.append(d);
  }
  return out;
}

py::list Tensors(const HfCheckpoint& c) {
  py::list out;
  for (const CheckpointTensor& t : c.tensors()) out.append(TensorDict(t));
  return out;
}

HfCheckpoint Open(py::object dir) {
  const std::string d = ToStr(dir, "HfCheckpoint.directory");
  py::gil_scoped_release release;
  return Unwrap(HfCheckpoint::Open(d));
}

WeightPlacementManifest Layout(py::object config, py::object tp, py::object pp,
                               py::object ep, py::object dp,
                               py::object checkpoint, py::object resource_id,
                               py::object revision, py::object generation,
                               py::object quantize, py::object fp8_block,
                               py::object dtype) {
  HfLayoutOptions o;
  o.quantize = ToStr(quantize, "hf_layout.quantize");
  o.block = ToFp8Block(fp8_block, "hf_layout.fp8_block");
  o.dtype = ToStr(dtype, "hf_layout.dtype");
  o.sizes.tp = ToI64(tp, "hf_layout.tp");
  o.sizes.pp = ToI64(pp, "hf_layout.pp");
  o.sizes.ep = ToI64(ep, "hf_layout.ep");
  o.sizes.dp = ToI64(dp, "hf_layout.dp");
  o.resource_id = ToStr(resource_id, "hf_layout.resource_id");
  o.revision = ToStr(revision, "hf_layout.revision");
  o.weight_generation = ToU64(generation, "hf_layout.weight_generation");
  const std::string text = ToStr(config, "hf_layout.config_json");
  std::optional<HfCheckpoint> ckpt;
  if (!checkpoint.is_none()) ckpt = checkpoint.cast<HfCheckpoint>();
  py::gil_scoped_release release;
  return Unwrap(HfLayout(text, o, ckpt ? &*ckpt : nullptr));
}

py::dict Load(const HfCheckpoint& c, const WeightPlacementManifest& target,
              py::dict buffers, py::object options, py::object progress_fn,
              bool convert, py::object fp8_block) {
  const CheckedBindings bindings =
      BindCheckedParticipants(target, buffers, BindingOptionsOf(options),
                              "checkpoint load target", "target bindings");
  PyProgress progress(std::move(progress_fn));
  CheckpointLoadOptions o;
  o.progress = progress.Callback();
  o.convert = convert;
  o.fp8_block = ToFp8Block(fp8_block, "hf.load.fp8_block");
  LoadReport r;
  {
    py::gil_scoped_release release;
    r = Unwrap(LoadCheckpoint(c, target, bindings, o));
  }
  progress.Rethrow();
  return DictOf(r);
}

CheckpointWriteOptions WriteOptions(py::object max_file_bytes,
                                    py::object staging_bytes) {
  CheckpointWriteOptions o;
  o.max_file_bytes = ToU64(max_file_bytes, "write_checkpoint.max_file_bytes");
  o.staging_bytes = ToU64(staging_bytes, "write_checkpoint.staging_bytes");
  return o;
}

// Plans, lays out, writes every given participant's share and finishes:
// the one-process form of the writer.
py::dict Write(const WeightPlacementManifest& placement, py::dict buffers,
               py::object out_dir, py::object max_file_bytes,
               py::object staging_bytes, py::object options,
               py::object progress_fn) {
  const CheckedBindings bindings =
      BindCheckedParticipants(placement, buffers, BindingOptionsOf(options),
                              "checkpoint write source", "source bindings");
  PyProgress progress(std::move(progress_fn));
  CheckpointWriteOptions o = WriteOptions(max_file_bytes, staging_bytes);
  o.progress = progress.Callback();
  const std::string dir = ToStr(out_dir, "write_checkpoint.out_dir");
  CheckpointWriteReport r;
  size_t files = 0;
  {
    py::gil_scoped_release release;
    auto plan = Unwrap(PlanCheckpointWrite(placement, o));
    ThrowIfError(CreateCheckpointFiles(plan, dir));
    r = Unwrap(WriteCheckpointFragments(plan, placement, bindings, dir, o));
    ThrowIfError(FinishCheckpoint(plan, dir));
    files = plan.files().size();
  }
  progress.Rethrow();
  py::dict d = DictOf(r);
  d["files"] = files;
  return d;
}

// The steps of the writer for processes that each write their share:
// every process plans (the same plan), one creates the files, each writes
// its participants' bytes, one finishes after every writer.
void RegisterWriteSteps(py::module_& m) {
  py::class_<CheckpointWritePlan>(
      m, "CheckpointWritePlan",
      "Where every tensor of a placement goes in a checkpoint; the same in "
      "every process that plans it from the same placement.")
      .def_property_readonly("files",
                             [](const CheckpointWritePlan& p) {
                               py::list out;
                               for (const auto& f : p.files())
                                 out.append(f.name);
                               return out;
                             })
      .def_property_readonly("tensor_bytes",
                             &CheckpointWritePlan::tensor_bytes);
  m.def(
      "plan_checkpoint_write",
      [](const WeightPlacementManifest& placement, py::object max_file_bytes) {
        CheckpointWriteOptions o = WriteOptions(max_file_bytes, py::int_(1));
        py::gil_scoped_release release;
        return Unwrap(PlanCheckpointWrite(placement, o));
      },
      py::arg("placement"), py::kw_only(),
      py::arg("max_file_bytes") = uint64_t{5'000'000'000});
  m.def(
      "create_checkpoint_files",
      [](const CheckpointWritePlan& plan, py::object out_dir) {
        const std::string dir = ToStr(out_dir, "write_checkpoint.out_dir");
        py::gil_scoped_release release;
        ThrowIfError(CreateCheckpointFiles(plan, dir));
      },
      py::arg("plan"), py::arg("out_dir"));
  m.def(
      "write_checkpoint_fragment_buffers",
      [](const CheckpointWritePlan& plan,
         const WeightPlacementManifest& placement, py::dict buffers,
         py::object out_dir, py::object staging_bytes, py::object options) {
        const CheckedBindings bindings = BindCheckedParticipants(
            placement, buffers, BindingOptionsOf(options),
            "checkpoint write source", "source bindings");
        CheckpointWriteOptions o;
        o.staging_bytes =
            ToU64(staging_bytes, "write_checkpoint.staging_bytes");
        const std::string dir = ToStr(out_dir, "write_checkpoint.out_dir");
        CheckpointWriteReport r;
        {
          py::gil_scoped_release release;
          r = Unwrap(
              WriteCheckpointFragments(plan, placement, bindings, dir, o));
        }
        return DictOf(r);
      },
      py::arg("plan"), py::arg("placement"), py::arg("buffers"),
      py::arg("out_dir"), py::kw_only(),
      py::arg("staging_bytes") = uint64_t{64} << 20,
      py::arg("options") = py::none());
  m.def(
      "finish_checkpoint",
      [](const CheckpointWritePlan& plan, py::object out_dir) {
        const std::string dir = ToStr(out_dir, "write_checkpoint.out_dir");
        py::gil_scoped_release release;
        ThrowIfError(FinishCheckpoint(plan, dir));
      },
      py::arg("plan"), py::arg("out_dir"));
}

}  // namespace

void RegisterHf(py::module_& m) {
  RegisterWriteSteps(m);
  py::class_<HfCheckpoint>(m, "HfCheckpoint",
                           "A Hugging Face checkpoint directory, its headers "
                           "checked and its files kept open read-only.")
      .def_static("open", &Open, py::arg("directory"))
      .def_property_readonly("directory", &HfCheckpoint::directory)
      .def_property_readonly("tensor_bytes", &HfCheckpoint::tensor_bytes)
      .def_property_readonly("header_bytes", &HfCheckpoint::header_bytes)
      .def_property_readonly("files", &Files)
      .def_property_readonly("tensors", &Tensors)
      .def(
          "find_tensor",
          [](const HfCheckpoint& c, const std::string& name) -> py::object {
            const CheckpointTensor* t = c.FindTensor(name);
            if (t == nullptr) return py::none();
            return TensorDict(*t);
          },
          py::arg("name"))
      .def("__repr__", [](const HfCheckpoint& c) {
        return "HfCheckpoint(" +
               py::repr(py::str(c.directory())).cast<std::string>() + ")";
      });
  m.def("hf_layout", &Layout, py::arg("config_json"), py::kw_only(),
        py::arg("tp") = 1, py::arg("pp") = 1, py::arg("ep") = 1,
        py::arg("dp") = 1, py::arg("checkpoint") = py::none(),
        py::arg("resource_id") = "", py::arg("revision") = "hf",
        py::arg("weight_generation") = 0, py::arg("quantize") = "",
        py::arg("fp8_block") = py::none(), py::arg("dtype") = "",
        "Lays a model's tensors out on a TP/PP/EP/DP grid (reshard hf "
        "layout).");
  m.def(
      "checkpoint_source",
      [](const HfCheckpoint& c, const WeightPlacementManifest& target) {
        return Unwrap(CheckpointSource(c, target));
      },
      py::arg("checkpoint"), py::arg("target"),
      "The checkpoint as the stored manifest a target load plans from.");
  m.def("load_checkpoint_buffers", &Load, py::arg("checkpoint"),
        py::arg("target"), py::arg("buffers"), py::arg("options") = py::none(),
        py::arg("progress") = py::none(), py::arg("convert") = false,
        py::arg("fp8_block") = py::none(),
        "Reads the bound target fragments straight from the checkpoint.");
  m.def("write_checkpoint_buffers", &Write, py::arg("placement"),
        py::arg("buffers"), py::arg("out_dir"), py::kw_only(),
        py::arg("max_file_bytes") = uint64_t{5'000'000'000},
        py::arg("staging_bytes") = uint64_t{64} << 20,
        py::arg("options") = py::none(), py::arg("progress") = py::none(),
        "Writes the placement's buffers as a sharded checkpoint.");
}

}  // namespace reshard::python
