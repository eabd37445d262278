#include "src/python/buffers.h"

#include <map>

#include "src/python/convert.h"
#include "src/python/errors.h"

namespace reshard::python {

namespace py = pybind11;

BufferBindingOptions BindingOptionsOf(py::handle options) {
  BufferBindingOptions o;
  if (options.is_none()) return o;
  if (!py::isinstance<py::dict>(options)) {
    ThrowInvalid("binding options", "must be a dict");
  }
  for (auto item : py::reinterpret_borrow<py::dict>(options)) {
    const std::string key = ToStr(item.first, "binding option name");
    const std::string field = "binding option " + key;
    if (key == "instance_id") {
      o.instance_id = ToStr(item.second, field);
    } else if (key == "generation") {
      o.generation = ToU64(item.second, field);
    } else if (key == "lease_id") {
      o.lease_id = ToStr(item.second, field);
    } else if (key == "worker_id") {
      o.worker_id = ToStr(item.second, field);
    } else if (key == "endpoint") {
      o.endpoint = ToStr(item.second, field);
    } else if (key == "device") {
      o.device = ToStr(item.second, field);
    } else {
      ThrowInvalid(field, "is not a binding option");
    }
  }
  return o;
}

namespace {

// {participant: {fragment id: address}}, in participant order.
using ParticipantBuffers = std::map<std::string, std::map<std::string, void*>>;

ParticipantBuffers BuffersOf(py::handle buffers, std::string_view side) {
  const std::string what = std::string(side) + " buffers";
  if (!py::isinstance<py::dict>(buffers)) ThrowInvalid(what, "must be a dict");
  // Participant order, whatever the dict's order.
  std::map<std::string, std::map<std::string, void*>> by_participant;
  for (auto item : py::reinterpret_borrow<py::dict>(buffers)) {
    const std::string participant = ToStr(item.first, what + " participant");
    if (!py::isinstance<py::dict>(item.second)) {
      ThrowInvalid(what + " of " + participant, "must be a dict");
    }
    auto& map = by_participant[participant];
    for (auto f : py::reinterpret_borrow<py::dict>(item.second)) {
      const std::string id = ToStr(f.first, what + " fragment id");
      const uint64_t address = ToU64(f.second, what + " address of " + id);
      map[id] = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
    }
  }
  return by_participant;
}

}  // namespace

std::vector<WeightRuntimeBindingManifest> DescribeParticipants(
    const WeightPlacementManifest& placement, py::handle buffers,
    const BufferBindingOptions& options, std::string_view side) {
  std::vector<WeightRuntimeBindingManifest> out;
  for (const auto& [participant, map] : BuffersOf(buffers, side)) {
    out.push_back(
        Unwrap(DescribeBuffers(placement, participant, map, options)));
  }
  return out;
}

CheckedBindings BindCheckedParticipants(
    const WeightPlacementManifest& placement, py::handle buffers,
    const BufferBindingOptions& options, std::string_view side,
    std::string_view context) {
  std::vector<CheckedBindings> parts;
  for (const auto& [participant, map] : BuffersOf(buffers, side)) {
    parts.push_back(
        Unwrap(BindCheckedBuffers(placement, participant, map, options)));
  }
  auto all = CheckedBindings::Merge(placement, parts, BindingCoverage::kSubset);
  if (!all.ok()) ThrowIfError(all.status().WithContext(context));
  return std::move(all).ValueOrDie();
}

}  // namespace reshard::python
