// The local path: bind caller buffers and reshard them in this process
// (reshard.h, LocalTransport).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "reshard/backends/local_transport.h"
#include "reshard/reshard.h"
#include "src/python/buffers.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

WeightRuntimeBindingManifest BindOne(const WeightPlacementManifest& placement,
                                     py::object participant_id,
                                     py::dict buffers, py::object options) {
  std::string device;
  const std::map<std::string, void*> map =
      AddressesOf(buffers, "buffers", &device);
  return Unwrap(BindBuffers(placement, ToStr(participant_id, "participant_id"),
                            map, OnDevice(BindingOptionsOf(options), device)));
}

py::dict ReshardBuffers(const WeightPlacementManifest& source,
                        py::dict source_buffers,
                        const WeightPlacementManifest& target,
                        py::dict target_buffers, py::object plan,
                        py::object threads, bool subset,
                        py::object source_options, py::object target_options,
                        bool convert, py::object fp8_block) {
  ReshardOptions options;
  options.plan.convert = convert;
  options.plan.fp8_block = ToFp8Block(fp8_block, "reshard.fp8_block");
  options.threads = static_cast<uint32_t>(ToU64(threads, "threads"));
  if (options.threads == 0) ThrowInvalid("threads", "must be >= 1");
  options.coverage =
      subset ? BindingCoverage::kSubset : BindingCoverage::kEveryOwner;
  BufferBindingOptions so = BindingOptionsOf(source_options);
  BufferBindingOptions to = BindingOptionsOf(target_options);
  // Each binding is checked once, here; Reshard takes them as checked.
  const CheckedBindings sources = BindCheckedParticipants(
      source, source_buffers, so, "source", "source bindings");
  const CheckedBindings targets = BindCheckedParticipants(
      target, target_buffers, to, "target", "target bindings");
  const LogicalTransferPlan* logical = nullptr;
  if (!plan.is_none()) {
    if (!py::isinstance<LogicalTransferPlan>(plan)) {
      ThrowInvalid("plan", "must be a LogicalTransferPlan");
    }
    logical = plan.cast<const LogicalTransferPlan*>();
  }
  Result<ReshardReport> report = Status::Internal("not run");
  {
    py::gil_scoped_release release;
    if (logical == nullptr) {
      report = Reshard(source, sources, target, targets, options);
    } else {
      report = Reshard(*logical, source, sources, target, targets, options);
    }
  }
  return DictOf(Unwrap(std::move(report)));
}

}  // namespace

void RegisterLocal(py::module_& m) {
  m.def("bind_buffers", &BindOne, py::arg("placement"),
        py::arg("participant_id"), py::arg("buffers"),
        py::arg("options") = py::none(),
        "Binds {placement fragment id: address} of one participant "
        "(BindBuffers); options override instance_id, generation, lease_id, "
        "worker_id, endpoint, device.");
  m.def("reshard_buffers", &ReshardBuffers, py::arg("source"),
        py::arg("source_buffers"), py::arg("target"), py::arg("target_buffers"),
        py::kw_only(), py::arg("plan") = py::none(), py::arg("threads") = 1,
        py::arg("subset") = false, py::arg("source_options") = py::none(),
        py::arg("target_options") = py::none(), py::arg("convert") = false,
        py::arg("fp8_block") = py::none(),
        "Binds {participant: {fragment: address}} of both sides and "
        "reshards in this process. Releases the GIL while moving bytes.");
}

}  // namespace reshard::python
