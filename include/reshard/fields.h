// Records and their fields. A record is a struct whose fields one function
// template names:
//
//   template <typename Visit>
//   void VisitFields(const Record& r, Visit&& visit);
//
// calls visit(name, value) once per field, names sorted. It is the one
// statement of what the record holds when written out: the CLI's --json and
// Python's dicts are both written from it (tools/cli_common.h,
// src/python/report_dict.h), so they hold the same keys and values. A value
// is a bool, an unsigned or signed integer, a double (seconds, or GB/s when
// the name ends in "gbps"), a std::string, another record, or a std::vector
// of those. A visitor may leave out fields a record does not hold (a key
// that applies to one kind of run only); it names every field it writes.

#ifndef RESHARD_FIELDS_H_
#define RESHARD_FIELDS_H_

#include <vector>

namespace reshard {

// Accepts any field; what FieldRecord calls VisitFields with.
struct AnyFieldVisitor {
  template <typename T>
  void operator()(const char* /*name*/, const T& /*value*/) const {}
};

// A type with VisitFields (found by argument-dependent lookup, so records
// of any namespace qualify).
template <typename T>
concept FieldRecord = requires(const T& record, AnyFieldVisitor visit) {
  VisitFields(record, visit);
};

// A list-valued field.
template <typename T>
inline constexpr bool kIsFieldList = false;
template <typename T, typename A>
inline constexpr bool kIsFieldList<std::vector<T, A>> = true;

}  // namespace reshard

#endif  // RESHARD_FIELDS_H_
