#include "src/python/convert.h"

#include <limits>

#include "src/python/errors.h"

namespace reshard::python {

namespace py = pybind11;

void ThrowInvalid(std::string_view field, std::string_view what) {
  throw StatusError(
      Status::InvalidArgument(std::string(field) + " " + std::string(what)));
}

namespace {

std::string TypeName(py::handle value) {
  return py::str(value.get_type().attr("__name__"));
}

// An exact int (not bool) as a Python int object.
py::int_ RequireInt(py::handle value, std::string_view field) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    ThrowInvalid(field, "must be an integer, got " + TypeName(value));
  }
  return py::reinterpret_borrow<py::int_>(value);
}

}  // namespace

int64_t ToI64(py::handle value, std::string_view field) {
  py::int_ v = RequireInt(value, field);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0) ThrowInvalid(field, "must fit in a signed 64-bit integer");
  return static_cast<int64_t>(x);
}

uint64_t ToU64(py::handle value, std::string_view field) {
  py::int_ v = RequireInt(value, field);
  if (PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    ThrowInvalid(field, "must fit in an unsigned 64-bit integer");
  }
  const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    ThrowInvalid(field, "must fit in an unsigned 64-bit integer");
  }
  return static_cast<uint64_t>(x);
}

std::optional<int64_t> ToOptionalI64(py::handle value, std::string_view field) {
  if (value.is_none()) return std::nullopt;
  return ToI64(value, field);
}

std::string ToStr(py::handle value, std::string_view field) {
  if (!PyUnicode_Check(value.ptr())) {
    ThrowInvalid(field, "must be a string, got " + TypeName(value));
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    ThrowInvalid(field, "must be valid Unicode (no lone surrogates)");
  }
  return std::string(data, static_cast<size_t>(size));
}

std::optional<std::string> ToOptionalStr(py::handle value,
                                         std::string_view field) {
  if (value.is_none()) return std::nullopt;
  return ToStr(value, field);
}

Dims ToDims(py::handle value, std::string_view field) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
    ThrowInvalid(field,
                 "must be a list or tuple of integers, got " + TypeName(value));
  }
  Dims out;
  for (py::handle item : value) out.push_back(ToI64(item, field));
  return out;
}

Fp8Block ToFp8Block(py::handle value, std::string_view field) {
  if (value.is_none()) return Fp8Block{};
  const Dims d = ToDims(value, field);
  if (d.size() != 2 || d[0] < 1 || d[1] < 1) {
    ThrowInvalid(field, "must be (rows, cols) of positive integers");
  }
  return Fp8Block{d[0], d[1]};
}

std::vector<std::string> ToStrings(py::handle value, std::string_view field) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
    ThrowInvalid(field,
                 "must be a list or tuple of strings, got " + TypeName(value));
  }
  std::vector<std::string> out;
  for (py::handle item : value) out.push_back(ToStr(item, field));
  return out;
}

PlacementHeader ToHeader(py::handle resource_id, py::handle revision,
                         py::handle weight_generation,
                         py::handle placement_set_id, std::string_view type) {
  const std::string t(type);
  PlacementHeader h;
  h.resource_id = ToStr(resource_id, t + ".resource_id");
  h.revision = ToStr(revision, t + ".revision");
  h.weight_generation = ToU64(weight_generation, t + ".weight_generation");
  h.placement_set_id = ToStr(placement_set_id, t + ".placement_set_id");
  return h;
}

py::tuple DimsTuple(const Dims& dims) {
  py::tuple t(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t[i] = py::int_(dims[i]);
  return t;
}

py::tuple StringsTuple(const std::vector<std::string>& strings) {
  py::tuple t(strings.size());
  for (size_t i = 0; i < strings.size(); ++i) t[i] = py::str(strings[i]);
  return t;
}

}  // namespace reshard::python
