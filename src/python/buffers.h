// Caller memory handed over by the Python package: for each participant a
// dict {placement fragment id: address}, or {placement fragment id:
// (address, device)} for memory of a device ("cuda:1"). The package
// (python/reshard/_tensors.py) derives the addresses from tensors and has
// already checked device, dtype, size and contiguity; here they become
// validated runtime bindings through the public BindBuffers, bound to the
// participant's device (the executor then moves that memory or refuses it
// naming the fragment).
#ifndef RESHARD_PYTHON_BUFFERS_H_
#define RESHARD_PYTHON_BUFFERS_H_

#include <pybind11/pybind11.h>

#include <map>
#include <string>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/reshard.h"

namespace reshard::python {

// `options` (a dict or None) overrides BufferBindingOptions fields:
// instance_id, generation, lease_id, worker_id, endpoint, device.
BufferBindingOptions BindingOptionsOf(pybind11::handle options);

// One participant's {fragment id: address or (address, device)}: the
// addresses; `device` set to the tuples' device (unchanged where every
// value is a plain address). Fragments of two devices, or of a device and
// host memory, are refused (one binding is on one device).
std::map<std::string, void*> AddressesOf(pybind11::handle buffers,
                                         const std::string& what,
                                         std::string* device);

// `options` bound to `device` where it is not "".
BufferBindingOptions OnDevice(BufferBindingOptions options,
                              const std::string& device);

// The binding of every participant of `buffers` ({participant: {fragment:
// address}}) in participant order, not yet checked against the placement
// (DescribeBuffers): for a consumer that checks plain bindings itself.
// Needs the GIL.
std::vector<WeightRuntimeBindingManifest> DescribeParticipants(
    const WeightPlacementManifest& placement, pybind11::handle buffers,
    const BufferBindingOptions& options, std::string_view side);

// The same as one checked set (coverage kSubset), each binding checked
// once, so that the consumer does not check it again; buffers shared by two
// participants are refused as the consumer would refuse them, prefixed
// with `context` (for example "source bindings"). Needs the GIL.
CheckedBindings BindCheckedParticipants(
    const WeightPlacementManifest& placement, pybind11::handle buffers,
    const BufferBindingOptions& options, std::string_view side,
    std::string_view context);

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_BUFFERS_H_
