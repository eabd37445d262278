// Python value -> library value conversions for the native module. Each
// names the field it converts in its error, so that a wrong argument is
// reported like any other invalid manifest field (InvalidArgumentError,
// a ValueError): "TensorDescriptor.itemsize must be an integer, got bool".
#ifndef RESHARD_PYTHON_CONVERT_H_
#define RESHARD_PYTHON_CONVERT_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/placement.h"

namespace reshard::python {

// Exact Python ints only (bool and float are refused).
int64_t ToI64(pybind11::handle value, std::string_view field);
uint64_t ToU64(pybind11::handle value, std::string_view field);
// None -> nullopt.
std::optional<int64_t> ToOptionalI64(pybind11::handle value,
                                     std::string_view field);
std::string ToStr(pybind11::handle value, std::string_view field);
std::optional<std::string> ToOptionalStr(pybind11::handle value,
                                         std::string_view field);
// A list or tuple of ints.
Dims ToDims(pybind11::handle value, std::string_view field);

// None (128 x 128) or (rows, cols) of positive integers: an FP8 block.
Fp8Block ToFp8Block(pybind11::handle value, std::string_view field);
// A list or tuple of str.
std::vector<std::string> ToStrings(pybind11::handle value,
                                   std::string_view field);

// The four header fields of a part or placement; `type` prefixes the
// field names in errors ("WeightPlacementPart.revision ...").
PlacementHeader ToHeader(pybind11::handle resource_id,
                         pybind11::handle revision,
                         pybind11::handle weight_generation,
                         pybind11::handle placement_set_id,
                         std::string_view type);

// A list or tuple whose items are all instances of T (a bound class).
template <typename T>
std::vector<T> ToList(pybind11::handle value, std::string_view field,
                      std::string_view type_name);

// Refuses, naming `field`, with InvalidArgumentError.
[[noreturn]] void ThrowInvalid(std::string_view field, std::string_view what);

pybind11::tuple DimsTuple(const Dims& dims);
pybind11::tuple StringsTuple(const std::vector<std::string>& strings);

template <typename T>
std::vector<T> ToList(pybind11::handle value, std::string_view field,
                      std::string_view type_name) {
  if (!pybind11::isinstance<pybind11::list>(value) &&
      !pybind11::isinstance<pybind11::tuple>(value)) {
    ThrowInvalid(field, "must be a list or tuple of " + std::string(type_name));
  }
  std::vector<T> out;
  for (pybind11::handle item : value) {
    if (!pybind11::isinstance<T>(item)) {
      ThrowInvalid(
          field,
          "must contain only " + std::string(type_name) + " objects, got " +
              std::string(pybind11::str(item.get_type().attr("__name__"))));
    }
    out.push_back(item.cast<T>());
  }
  return out;
}

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_CONVERT_H_
