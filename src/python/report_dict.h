// A library report as a Python dict: every field its VisitFields names
// (weight_store.h, live.h), the same keys and values the CLI's --json
// writes.

#ifndef RESHARD_PYTHON_REPORT_DICT_H_
#define RESHARD_PYTHON_REPORT_DICT_H_

#include <pybind11/pybind11.h>

namespace reshard::python {

template <typename Record>
pybind11::dict DictOf(const Record& record) {
  pybind11::dict d;
  VisitFields(record,
              [&d](const char* name, const auto& value) { d[name] = value; });
  return d;
}

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_REPORT_DICT_H_
