// Caller memory handed over by the Python package: for each participant a
// dict {placement fragment id: address}. The package (python/reshard/
// _tensors.py) derives the addresses from tensors and has already checked
// device, dtype, size and contiguity; here they become validated runtime
// bindings through the public BindBuffers.
#ifndef RESHARD_PYTHON_BUFFERS_H_
#define RESHARD_PYTHON_BUFFERS_H_

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/reshard.h"

namespace reshard::python {

// `options` (a dict or None) overrides BufferBindingOptions fields:
// instance_id, generation, lease_id, worker_id, endpoint, device.
BufferBindingOptions BindingOptionsOf(pybind11::handle options);

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
