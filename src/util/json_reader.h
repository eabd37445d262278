// Strict JSON reading over simdjson's DOM: exact field sets, duplicate keys
// rejected, integers only where the contract says integer (booleans and
// floats rejected), u64 range checks, and error messages that carry the
// field's path ("parts[3].fragments[1].nbytes must be an integer").

#ifndef RESHARD_UTIL_JSON_READER_H_
#define RESHARD_UTIL_JSON_READER_H_

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"
#include "util/canonical_json.h"

namespace reshard::internal {

using JsonElement = simdjson::dom::element;

// A path into a document, rendered only when an error needs it. Nodes live
// on the caller's stack.
class JsonPath {
 public:
  JsonPath() = default;
  JsonPath(const JsonPath* parent, std::string_view key)
      : parent_(parent), key_(key), is_index_(false) {}
  JsonPath(const JsonPath* parent, size_t index)
      : parent_(parent), index_(index), is_index_(true) {}

  JsonPath Field(std::string_view key) const { return JsonPath(this, key); }
  JsonPath Index(size_t index) const { return JsonPath(this, index); }
  // "$" for the root, else "a.b[2].c".
  std::string ToString() const;

 private:
  const JsonPath* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  bool is_index_ = false;
};

// Owns a parser and the parsed document.
class JsonDocument {
 public:
  // Parses `text`; rejects NaN/Infinity, invalid UTF-8 and trailing content.
  static Result<JsonDocument> Parse(std::string_view text);
  JsonElement root() const { return root_; }

  JsonDocument(JsonDocument&&) = default;
  JsonDocument& operator=(JsonDocument&&) = default;

 private:
  JsonDocument() = default;
  std::unique_ptr<simdjson::dom::parser> parser_;
  JsonElement root_;
};

// An object whose field set has been checked against the contract. N bounds
// the number of fields (kept small: one lives per decoded fragment).
template <size_t N>
class BasicStrictObject {
 public:
  static constexpr size_t kMaxFields = N;

  // Checks that `element` is an object with no duplicate keys whose keys are
  // all of `required` plus any subset of `optional`. `what` names the object
  // in messages ("placement fragment").
  static Result<BasicStrictObject> Make(
      JsonElement element, const JsonPath& path, std::string_view what,
      std::initializer_list<std::string_view> required,
      std::initializer_list<std::string_view> optional = {});

  // The value of a required field, or of an optional field that is present.
  std::optional<JsonElement> Find(std::string_view key) const;
  JsonElement Get(std::string_view key) const { return *Find(key); }

 private:
  std::array<std::string_view, kMaxFields> keys_{};
  std::array<JsonElement, kMaxFields> values_{};
  size_t size_ = 0;
};

using StrictObject = BasicStrictObject<16>;
// For wide legacy records.
using WideStrictObject = BasicStrictObject<32>;

Result<std::string_view> ReadString(JsonElement e, const JsonPath& path);
// The non-empty string field `key` of `obj` (an id), copied.
template <size_t N>
Result<std::string> ReadIdField(const BasicStrictObject<N>& obj,
                                std::string_view key, const JsonPath& path);
// Rule 3: ids are non-empty strings.
Result<std::string_view> ReadNonEmptyString(JsonElement e,
                                            const JsonPath& path);
// Rule 1: exact integers (no bool, no float), within int64.
Result<int64_t> ReadInt(JsonElement e, const JsonPath& path);
// Rule 2: 0 <= v <= 2^64-1.
Result<uint64_t> ReadU64(JsonElement e, const JsonPath& path);
Result<bool> ReadBool(JsonElement e, const JsonPath& path);
// null or an integer.
Result<std::optional<int64_t>> ReadNullableInt(JsonElement e,
                                               const JsonPath& path);
Result<std::vector<int64_t>> ReadIntArray(JsonElement e, const JsonPath& path);
Result<std::vector<std::string>> ReadStringArray(JsonElement e,
                                                 const JsonPath& path);
Result<simdjson::dom::array> ReadArray(JsonElement e, const JsonPath& path);

// Parses any JSON text and re-encodes it canonically (sorted keys, compact,
// Python's escaping in the given mode). Floats are not part of the contract
// and are rejected.
Result<std::string> CanonicalizeJsonText(std::string_view text, JsonAscii mode);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_JSON_READER_H_
