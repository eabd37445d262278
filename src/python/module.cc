#include "src/python/module.h"

#include <pybind11/pybind11.h>

#include "src/python/errors.h"

PYBIND11_MODULE(_reshard, m) {
  m.doc() =
      "reshard's native core: the placement contract, the planner and the "
      "local, store and live paths. Import the package `reshard`, not this "
      "module.";
  reshard::python::RegisterErrors(m);
  reshard::python::RegisterContract(m);
  reshard::python::RegisterPlan(m);
  reshard::python::RegisterLocal(m);
  reshard::python::RegisterStore(m);
  reshard::python::RegisterLive(m);
  reshard::python::RegisterDlpack(m);
  reshard::python::RegisterHf(m);
  reshard::python::RegisterEngines(m);
}
