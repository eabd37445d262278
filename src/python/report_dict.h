// A library record as a Python dict: every field its VisitFields names
// (reshard/fields.h), the same keys and values the CLI's --json writes
// (tools/record_json.h). A record field is a dict, a list field a list.

#ifndef RESHARD_PYTHON_REPORT_DICT_H_
#define RESHARD_PYTHON_REPORT_DICT_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "reshard/fields.h"

namespace reshard::python {

template <FieldRecord Record>
pybind11::dict DictOf(const Record& record);

// One field's value as a Python object.
template <typename T>
pybind11::object FieldObject(const T& value) {
  if constexpr (FieldRecord<T>) {
    return DictOf(value);
  } else if constexpr (kIsFieldList<T>) {
    pybind11::list out;
    for (const auto& item : value) out.append(FieldObject(item));
    return out;
  } else {
    return pybind11::cast(value);
  }
}

template <FieldRecord Record>
pybind11::dict DictOf(const Record& record) {
  pybind11::dict d;
  VisitFields(record, [&d](const char* name, const auto& value) {
    d[name] = FieldObject(value);
  });
  return d;
}

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_REPORT_DICT_H_
