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
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dims.h"
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

// A parser and the buffer its documents are copied into: simdjson reads up
// to SIMDJSON_PADDING bytes past a document's end, which a caller's
// string_view does not promise.
struct ParserSlot {
  simdjson::dom::parser parser;
  std::unique_ptr<char[]> padded;
  size_t padded_capacity = 0;
};

// Returns parser slots to JsonDocument's pool (json_reader.cc) instead of
// freeing them.
struct ParserRelease {
  void operator()(ParserSlot* slot) const;
};

// Owns a parser and the parsed document. The parser and its padded copy of
// the text come from a process-wide pool of one idle slot and go back to it
// when the document is destroyed: a parser's buffers, and the copy, cost
// about as much to allocate and first touch as a parse of the document that
// sized them (measured: the first touch of 278 MB took 0.12 s here, the
// parse 0.13 s), and decoders parse documents one after the other (both
// sides of a plan, every part of a store). Slots sized for documents over
// kMaxPooledParserBytes are freed instead, so the pool holds a bounded
// amount of memory.
class JsonDocument {
 public:
  // Parses `text`; rejects NaN/Infinity, invalid UTF-8 and trailing content.
  static Result<JsonDocument> Parse(std::string_view text);
  JsonElement root() const { return root_; }

  // The largest document capacity whose parser is kept for reuse.
  static constexpr size_t kMaxPooledParserBytes = size_t{512} << 20;

  JsonDocument(JsonDocument&&) = default;
  JsonDocument& operator=(JsonDocument&&) = default;

 private:
  JsonDocument() = default;
  std::unique_ptr<ParserSlot, ParserRelease> parser_;
  JsonElement root_;
};

// A JSON array with its path. Items are visited in order with their own
// paths ("parts[3]"), so readers of items name them in messages.
class JsonArray {
 public:
  JsonArray(simdjson::dom::array array, const JsonPath& path)
      : array_(array), path_(path) {}

  size_t size() const { return array_.size(); }
  const JsonPath& path() const { return path_; }
  simdjson::dom::array::iterator begin() const { return array_.begin(); }
  simdjson::dom::array::iterator end() const { return array_.end(); }

  // Calls `visit(item, item_path)` for every item and stops at the first
  // error, which it returns. The JsonArray must outlive the call.
  template <typename Visit>
  Status ForEach(Visit&& visit) const {
    size_t i = 0;
    for (JsonElement item : array_) {
      const JsonPath item_path = path_.Index(i++);
      RESHARD_RETURN_NOT_OK(visit(item, item_path));
    }
    return Status::OK();
  }

 private:
  simdjson::dom::array array_;
  JsonPath path_;
};

// An object whose field set has been checked against the contract. N bounds
// the number of fields (kept small: one lives per decoded fragment).
//
// The object carries its own path, and its typed getters read one field and
// name it in messages ("parts[3].fragments[1].nbytes must be an integer").
// A getter may only be called for a required field or for an optional field
// that Has(); nothing is copied except where the getter returns an owning
// type. Paths handed out (path(), child objects and arrays) point into this
// object, which must outlive them and must not move while they are in use.
template <size_t N>
class BasicStrictObject {
 public:
  static constexpr size_t kMaxFields = N;

  // Checks that `element` is an object with no duplicate keys whose keys are
  // all of `required` plus any subset of `optional`. `what` names the object
  // in messages ("placement fragment"). The node `path` is copied; its
  // parents must outlive the object.
  static Result<BasicStrictObject> Make(
      JsonElement element, const JsonPath& path, std::string_view what,
      std::initializer_list<std::string_view> required,
      std::initializer_list<std::string_view> optional = {});

  const JsonPath& path() const { return path_; }
  // The path of field `key` of this object.
  JsonPath FieldPath(std::string_view key) const { return path_.Field(key); }

  // The value of a required field, or of an optional field that is present.
  std::optional<JsonElement> Find(std::string_view key) const;
  JsonElement Get(std::string_view key) const { return *Find(key); }
  bool Has(std::string_view key) const { return Find(key).has_value(); }

  // Typed getters: the field's value, or the strict reader's error for it.
  Result<std::string_view> String(std::string_view key) const;
  // Rule 3: ids are non-empty strings.
  Result<std::string_view> NonEmptyString(std::string_view key) const;
  // A non-empty string (an id), copied.
  Result<std::string> Id(std::string_view key) const;
  // Rule 1: exact integers within int64.
  Result<int64_t> I64(std::string_view key) const;
  // Rule 2: 0 <= v <= 2^64-1.
  Result<uint64_t> U64(std::string_view key) const;
  Result<bool> Bool(std::string_view key) const;
  // An integer, or nullopt for null (and for an optional field not present).
  Result<std::optional<int64_t>> OptionalI64(std::string_view key) const;
  Result<Dims> IntArray(std::string_view key) const;
  Result<std::vector<std::string>> StringArray(std::string_view key) const;
  Result<JsonArray> Array(std::string_view key) const;
  // The field as a strict object (see Make).
  Result<BasicStrictObject<16>> Object(
      std::string_view key, std::string_view what,
      std::initializer_list<std::string_view> required,
      std::initializer_list<std::string_view> optional = {}) const;
  // The field read by `read(element, path)`, a reader of a sub-object
  // (ReadRank, ReadTopology ...).
  template <typename Read>
  auto Decode(std::string_view key, Read&& read) const {
    return read(Get(key), path_.Field(key));
  }

 private:
  JsonPath path_;
  std::array<std::string_view, kMaxFields> keys_{};
  std::array<JsonElement, kMaxFields> values_{};
  size_t size_ = 0;
};

using StrictObject = BasicStrictObject<16>;
// For wide legacy records.
using WideStrictObject = BasicStrictObject<32>;

// Readers of one element at `path`; the getters above are built on them.
Result<std::string_view> ReadString(JsonElement e, const JsonPath& path);
// The non-empty string field `key` of `obj` (at `path`), copied. Prefer
// obj.Id(key), which knows the object's path.
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
Result<Dims> ReadIntArray(JsonElement e, const JsonPath& path);
Result<std::vector<std::string>> ReadStringArray(JsonElement e,
                                                 const JsonPath& path);
Result<simdjson::dom::array> ReadArray(JsonElement e, const JsonPath& path);

// Parses any JSON text and re-encodes it canonically (sorted keys, compact,
// Python's escaping in the given mode). Floats are not part of the contract
// and are rejected.
// Refuses a duplicate key in any object of the document under `e`
// (InvalidArgument "<path>: duplicate JSON field \"k\"", the same words as
// the strict readers): for documents with open field sets (config.json)
// that are not read through StrictObject.
Status RejectDuplicateKeys(JsonElement e, const JsonPath& path);

Result<std::string> CanonicalizeJsonText(std::string_view text, JsonAscii mode);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_JSON_READER_H_
