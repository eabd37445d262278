// The native module reshard._reshard: one Register function per part of
// the public API (include/reshard/), called by the module initializer
// (module.cc). The module binds public headers only; the Python package
// (python/reshard/) adds tensor intake and the Pythonic helpers on top.
#ifndef RESHARD_PYTHON_MODULE_H_
#define RESHARD_PYTHON_MODULE_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::python {

void RegisterContract(pybind11::module_& m);        // contract_py.cc
void RegisterPlacement(pybind11::module_& m);       // placement_py.cc
void RegisterBinding(pybind11::module_& m);         // binding_py.cc
void RegisterStoredManifest(pybind11::module_& m);  // binding_py.cc
void RegisterPlan(pybind11::module_& m);            // plan_py.cc
void RegisterLocal(pybind11::module_& m);           // transfer_py.cc
void RegisterStore(pybind11::module_& m);           // store_py.cc
void RegisterLive(pybind11::module_& m);            // live_py.cc
void RegisterDlpack(pybind11::module_& m);          // dlpack_py.cc
void RegisterHf(pybind11::module_& m);              // hf_py.cc
void RegisterEngines(pybind11::module_& m);         // engine_py.cc

// A live session's check of its peers' target declarations against the
// engine layout (placement, parameter maps JSON) it expects them to hold
// (engine_py.cc; docs/engines.md, "Parameter-map fingerprints"). A rank
// that declares nothing binds no engine parameters and is not checked.
Result<std::function<Status(uint32_t, std::string_view)>> TargetMapsCheck(
    const WeightPlacementManifest& placement, const std::string& maps);

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_MODULE_H_
