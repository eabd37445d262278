// A record as the CLI's --json writes it: every field its VisitFields names
// (reshard/fields.h), keys sorted, the same keys and values Python's dicts
// hold (src/python/report_dict.h). The one writer of every record's JSON.

#ifndef RESHARD_TOOLS_RECORD_JSON_H_
#define RESHARD_TOOLS_RECORD_JSON_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "reshard/fields.h"
#include "util/canonical_json.h"

namespace reshard::cli {

// Decimals a double field is written with: three for a rate (a name ending
// in "gbps"), six for anything else (seconds).
inline int DecimalsOf(std::string_view name) {
  return name.ends_with("gbps") ? 3 : 6;
}

// `value` with `decimals` decimals, written raw (not canonical: a --json
// time or rate).
inline void FixedNumber(internal::CanonicalJsonWriter* w, double value,
                        int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  w->Raw(buf);
}

template <FieldRecord Record>
void WriteFields(internal::CanonicalJsonWriter* w, const Record& record);

// Writes the value of field `name`: a record as an object, a list as an
// array, a double with DecimalsOf(name) decimals.
template <typename T>
void WriteFieldValue(internal::CanonicalJsonWriter* w, std::string_view name,
                     const T& value) {
  if constexpr (FieldRecord<T>) {
    w->BeginObject();
    WriteFields(w, value);
    w->EndObject();
  } else if constexpr (kIsFieldList<T>) {
    w->BeginArray();
    for (const auto& item : value) WriteFieldValue(w, name, item);
    w->EndArray();
  } else if constexpr (std::is_same_v<T, bool>) {
    w->Bool(value);
  } else if constexpr (std::is_convertible_v<T, std::string_view>) {
    w->String(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    FixedNumber(w, value, DecimalsOf(name));
  } else if constexpr (std::is_signed_v<T>) {
    w->Int(value);
  } else {
    w->UInt(value);
  }
}

// One member of an object being written: its key and how to write its
// value. Members are collected first, so that an object's keys come out
// sorted whatever order its parts name them in.
using JsonMembers =
    std::map<std::string, std::function<void(internal::CanonicalJsonWriter*)>>;

// Adds every field of `record` to `members` (values copied: a visitor may
// pass values it computes).
template <FieldRecord Record>
void AddFields(JsonMembers* members, const Record& record) {
  VisitFields(record, [members](const char* name, const auto& value) {
    (*members)[name] = [key = std::string(name),
                        value](internal::CanonicalJsonWriter* w) {
      w->Key(key);
      WriteFieldValue(w, key, value);
    };
  });
}

// Writes every field of `record` as keys of the open object of `w`, sorted.
template <FieldRecord Record>
void WriteFields(internal::CanonicalJsonWriter* w, const Record& record) {
  JsonMembers members;
  AddFields(&members, record);
  for (const auto& member : members) member.second(w);
}

// Keys a command adds around a library record.
using ExtraFields =
    std::map<std::string, std::variant<uint64_t, bool, std::string>>;

// `record`'s fields, `seconds` (name -> value, six decimals) and `extra` as
// one JSON object, keys sorted: a command's --json document around one
// library record.
template <FieldRecord Record>
std::string RecordJson(
    const Record& record, const std::map<std::string, double>& seconds = {},
    const ExtraFields& extra = {},
    internal::JsonAscii ascii = internal::JsonAscii::kEscapeNonAscii) {
  JsonMembers members;
  AddFields(&members, record);
  for (const auto& [name, value] : seconds) {
    members[name] = [key = name, value](internal::CanonicalJsonWriter* w) {
      w->Key(key);
      FixedNumber(w, value, 6);
    };
  }
  for (const auto& [name, value] : extra) {
    members[name] = [key = name, value](internal::CanonicalJsonWriter* w) {
      w->Key(key);
      std::visit([&](const auto& v) { WriteFieldValue(w, key, v); }, value);
    };
  }
  std::string out;
  internal::CanonicalJsonWriter w(&out, ascii);
  w.BeginObject();
  for (const auto& member : members) member.second(&w);
  w.EndObject();
  return out;
}

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_RECORD_JSON_H_
