// Canonical JSON writer: byte-identical to Python's
// json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=...).
//
// The writer does not sort: callers emit object keys in ascending code-point
// order (UTF-8 byte order), which debug builds assert. Strings must be valid
// UTF-8; the contract's readers guarantee that for every value they produce.

#ifndef RESHARD_UTIL_CANONICAL_JSON_H_
#define RESHARD_UTIL_CANONICAL_JSON_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/json.h"

namespace reshard::internal {

using ::reshard::JsonAscii;

// Appends the quoted, escaped form of `utf8` to `out`.
void AppendJsonString(std::string_view utf8, JsonAscii mode, std::string* out);

// Streams canonical JSON into a string. Separators and commas are handled by
// the writer; the caller only opens, closes, and supplies keys and values.
class CanonicalJsonWriter {
 public:
  explicit CanonicalJsonWriter(std::string* out,
                               JsonAscii mode = JsonAscii::kEscapeNonAscii)
      : out_(out), mode_(mode) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Emits `"key":`; the next call supplies the value.
  void Key(std::string_view key);
  void String(std::string_view value);
  void Int(int64_t value);
  void UInt(uint64_t value);
  void Bool(bool value);
  void Null();
  // Emits already-canonical JSON text as one value (no validation).
  void Raw(std::string_view json);

  // Convenience: "key":value pairs.
  void KeyString(std::string_view key, std::string_view value) {
    Key(key);
    String(value);
  }
  void KeyInt(std::string_view key, int64_t value) {
    Key(key);
    Int(value);
  }
  void KeyUInt(std::string_view key, uint64_t value) {
    Key(key);
    UInt(value);
  }
  void IntArray(std::span<const int64_t> values);
  void IntArray(std::initializer_list<int64_t> values) {
    IntArray(std::span<const int64_t>(values.begin(), values.size()));
  }

  std::string* out() const { return out_; }

 private:
  void BeforeValue();

  std::string* out_;
  JsonAscii mode_;
  // One entry per open container: true once it holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
#ifndef NDEBUG
  std::vector<std::string> last_key_;
#endif
};

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_CANONICAL_JSON_H_
