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

std::map<std::string, void*> AddressesOf(py::handle buffers,
                                         const std::string& what,
                                         std::string* device) {
  if (!py::isinstance<py::dict>(buffers)) ThrowInvalid(what, "must be a dict");
  std::map<std::string, void*> map;
  std::string first_id;  // the first fragment given with a device
  for (auto f : py::reinterpret_borrow<py::dict>(buffers)) {
    const std::string id = ToStr(f.first, what + " fragment id");
    py::handle address = f.second;
    if (py::isinstance<py::tuple>(f.second)) {
      auto pair = py::reinterpret_borrow<py::tuple>(f.second);
      if (pair.size() != 2) {
        ThrowInvalid(what + " of " + id,
                     "must be an address or (address, device)");
      }
      address = pair[0];
      const std::string on = ToStr(pair[1], what + " device of " + id);
      if (!first_id.empty() && on != *device) {
        ThrowInvalid(what + " of " + id, "is on device " + on + " and " +
                                             first_id + " on " + *device +
                                             ": one binding is on one device");
      }
      if (first_id.empty()) first_id = id;
      *device = on;
    }
    const uint64_t at = ToU64(address, what + " address of " + id);
    map[id] = reinterpret_cast<void*>(static_cast<uintptr_t>(at));
  }
  if (!first_id.empty() && map.size() != 0) {
    for (auto f : py::reinterpret_borrow<py::dict>(buffers)) {
      if (!py::isinstance<py::tuple>(f.second)) {
        const std::string id = ToStr(f.first, what + " fragment id");
        ThrowInvalid(what + " of " + id, "is in host memory and " + first_id +
                                             " on " + *device +
                                             ": one binding is on one device");
      }
    }
  }
  return map;
}

BufferBindingOptions OnDevice(BufferBindingOptions options,
                              const std::string& device) {
  if (!device.empty()) options.device = device;
  return options;
}

namespace {

struct ParticipantMemory {
  std::map<std::string, void*> buffers;
  std::string device;  // "" unless the addresses came with one
};

// {participant: {fragment id: address or (address, device)}}, in
// participant order.
using ParticipantBuffers = std::map<std::string, ParticipantMemory>;

ParticipantBuffers BuffersOf(py::handle buffers, std::string_view side) {
  const std::string what = std::string(side) + " buffers";
  if (!py::isinstance<py::dict>(buffers)) ThrowInvalid(what, "must be a dict");
  // Participant order, whatever the dict's order.
  ParticipantBuffers by_participant;
  for (auto item : py::reinterpret_borrow<py::dict>(buffers)) {
    const std::string participant = ToStr(item.first, what + " participant");
    ParticipantMemory& m = by_participant[participant];
    m.buffers =
        AddressesOf(item.second, what + " of " + participant, &m.device);
  }
  return by_participant;
}

}  // namespace

std::vector<WeightRuntimeBindingManifest> DescribeParticipants(
    const WeightPlacementManifest& placement, py::handle buffers,
    const BufferBindingOptions& options, std::string_view side) {
  std::vector<WeightRuntimeBindingManifest> out;
  for (const auto& [participant, m] : BuffersOf(buffers, side)) {
    out.push_back(Unwrap(DescribeBuffers(placement, participant, m.buffers,
                                         OnDevice(options, m.device))));
  }
  return out;
}

CheckedBindings BindCheckedParticipants(
    const WeightPlacementManifest& placement, py::handle buffers,
    const BufferBindingOptions& options, std::string_view side,
    std::string_view context) {
  std::vector<CheckedBindings> parts;
  for (const auto& [participant, m] : BuffersOf(buffers, side)) {
    parts.push_back(Unwrap(BindCheckedBuffers(placement, participant, m.buffers,
                                              OnDevice(options, m.device))));
  }
  auto all = CheckedBindings::Merge(placement, parts, BindingCoverage::kSubset);
  if (!all.ok()) ThrowIfError(all.status().WithContext(context));
  return std::move(all).ValueOrDie();
}

}  // namespace reshard::python
