#include "util/json_reader.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "reshard/json.h"
#include "util/printable.h"

namespace reshard::internal {
namespace {

using simdjson::dom::element_type;

// True if `text` holds a NaN or Infinity token outside of strings: Python's
// encoder can produce those, and we name them instead of a generic error.
bool HasNonFiniteToken(std::string_view text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (text.substr(i, 3) == "NaN" || text.substr(i, 8) == "Infinity") {
      return true;
    }
  }
  return false;
}

// True if `text` holds an integer token of 19 or more digits outside
// strings: after a failed parse such a token is out of the 64-bit range
// (simdjson reports it as a generic number error).
bool HasHugeInteger(std::string_view text) {
  bool in_string = false;
  size_t digits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c >= '0' && c <= '9') {
      if (++digits >= 19) return true;
    } else {
      digits = 0;
      in_string = c == '"';
    }
  }
  return false;
}

Status TypeError(const JsonPath& path, std::string_view expectation) {
  return Status::InvalidArgument(path.ToString() + " " +
                                 std::string(expectation));
}

void WriteCanonical(JsonElement e, CanonicalJsonWriter* w, Status* error,
                    const JsonPath& path) {
  if (!error->ok()) return;
  switch (e.type()) {
    case element_type::OBJECT: {
      std::vector<std::pair<std::string_view, JsonElement>> fields;
      for (auto field : simdjson::dom::object(e)) {
        fields.emplace_back(field.key, field.value);
      }
      std::sort(fields.begin(), fields.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t i = 1; i < fields.size(); ++i) {
        if (fields[i].first == fields[i - 1].first) {
          *error = Status::InvalidArgument(path.ToString() +
                                           ": duplicate JSON field \"" +
                                           std::string(fields[i].first) + "\"");
          return;
        }
      }
      w->BeginObject();
      for (const auto& [key, value] : fields) {
        w->Key(key);
        WriteCanonical(value, w, error, path.Field(key));
      }
      w->EndObject();
      return;
    }
    case element_type::ARRAY: {
      w->BeginArray();
      size_t i = 0;
      for (auto item : simdjson::dom::array(e)) {
        WriteCanonical(item, w, error, path.Index(i++));
      }
      w->EndArray();
      return;
    }
    case element_type::STRING:
      w->String(std::string_view(e));
      return;
    case element_type::INT64:
      w->Int(int64_t(e));
      return;
    case element_type::UINT64:
      w->UInt(uint64_t(e));
      return;
    case element_type::DOUBLE:
      *error = Status::InvalidArgument(
          path.ToString() +
          " is a floating-point number; the contract has integers only");
      return;
    case element_type::BOOL:
      w->Bool(bool(e));
      return;
    case element_type::NULL_VALUE:
      w->Null();
      return;
  }
}

}  // namespace

Status RejectDuplicateKeys(JsonElement e, const JsonPath& path) {
  if (e.type() == simdjson::dom::element_type::ARRAY) {
    size_t i = 0;
    for (auto item : simdjson::dom::array(e)) {
      RESHARD_RETURN_NOT_OK(RejectDuplicateKeys(item, path.Index(i++)));
    }
    return Status::OK();
  }
  if (e.type() != simdjson::dom::element_type::OBJECT) return Status::OK();
  std::vector<std::string_view> keys;
  for (auto field : simdjson::dom::object(e)) {
    keys.push_back(field.key);
    RESHARD_RETURN_NOT_OK(
        RejectDuplicateKeys(field.value, path.Field(field.key)));
  }
  std::sort(keys.begin(), keys.end());
  const auto dup = std::adjacent_find(keys.begin(), keys.end());
  if (dup != keys.end()) {
    return Status::InvalidArgument(
        path.ToString() + ": duplicate JSON field \"" + Printable(*dup) + "\"");
  }
  return Status::OK();
}

std::string JsonPath::ToString() const {
  std::vector<const JsonPath*> chain;
  for (const JsonPath* p = this; p != nullptr && p->parent_ != nullptr;
       p = p->parent_) {
    chain.push_back(p);
  }
  if (chain.empty()) return "$";
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const JsonPath* p = *it;
    if (p->is_index_) {
      out += '[';
      out += std::to_string(p->index_);
      out += ']';
    } else {
      if (!out.empty()) out += '.';
      out.append(p->key_);
    }
  }
  return out;
}

namespace {

// The pool of JsonDocument: at most one idle parser slot.
std::mutex pool_mutex;
std::unique_ptr<ParserSlot> pooled_slot;

std::unique_ptr<ParserSlot> TakePooledSlot() {
  std::lock_guard<std::mutex> lock(pool_mutex);
  if (pooled_slot == nullptr) return std::make_unique<ParserSlot>();
  return std::move(pooled_slot);
}

// Copies `text` into the slot's padded buffer, growing it if needed.
const char* CopyPadded(std::string_view text, ParserSlot* slot) {
  const size_t need = text.size() + simdjson::SIMDJSON_PADDING;
  if (slot->padded_capacity < need) {
    slot->padded.reset();  // the old copy is not needed: free it first
    slot->padded.reset(new char[need]);
    slot->padded_capacity = need;
  }
  std::memcpy(slot->padded.get(), text.data(), text.size());
  std::memset(slot->padded.get() + text.size(), 0, simdjson::SIMDJSON_PADDING);
  return slot->padded.get();
}

}  // namespace

void ParserRelease::operator()(ParserSlot* slot) const {
  std::unique_ptr<ParserSlot> owned(slot);
  if (owned->parser.capacity() > JsonDocument::kMaxPooledParserBytes ||
      owned->padded_capacity >
          JsonDocument::kMaxPooledParserBytes + simdjson::SIMDJSON_PADDING) {
    return;
  }
  std::unique_ptr<ParserSlot> evicted;
  std::lock_guard<std::mutex> lock(pool_mutex);
  // Keep the larger of the two: it serves the next document of either size.
  if (pooled_slot == nullptr ||
      pooled_slot->parser.capacity() < owned->parser.capacity()) {
    evicted = std::move(pooled_slot);
    pooled_slot = std::move(owned);
  }
}

Result<JsonDocument> JsonDocument::Parse(std::string_view text) {
  JsonDocument doc;
  doc.parser_.reset(TakePooledSlot().release());
  const char* padded = CopyPadded(text, doc.parser_.get());
  auto result = doc.parser_->parser.parse(padded, text.size(), false);
  if (result.error() != simdjson::SUCCESS) {
    if (HasNonFiniteToken(text)) {
      return Status::InvalidArgument("non-finite JSON number is unsupported");
    }
    if (result.error() == simdjson::NUMBER_OUT_OF_RANGE ||
        (result.error() == simdjson::NUMBER_ERROR && HasHugeInteger(text))) {
      return Status::InvalidArgument(
          "JSON integer must fit in an unsigned 64-bit integer");
    }
    return Status::InvalidArgument(std::string("invalid JSON: ") +
                                   simdjson::error_message(result.error()));
  }
  doc.root_ = result.value_unsafe();
  return doc;
}

template <size_t N>
Result<BasicStrictObject<N>> BasicStrictObject<N>::Make(
    JsonElement element, const JsonPath& path, std::string_view what,
    std::initializer_list<std::string_view> required,
    std::initializer_list<std::string_view> optional) {
  if (element.type() != element_type::OBJECT) {
    return TypeError(path, "must be a JSON object");
  }
  if (required.size() + optional.size() > kMaxFields) {
    return Status::Internal("StrictObject supports at most " +
                            std::to_string(N) + " fields");
  }
  BasicStrictObject obj;
  obj.path_ = path;
  std::array<std::string_view, kMaxFields> expected{};
  size_t n_expected = 0;
  for (auto k : required) expected[n_expected++] = k;
  for (auto k : optional) expected[n_expected++] = k;
  std::array<bool, kMaxFields> seen{};
  // Canonical input lists keys in sorted order; callers list `required` in
  // that order too, so the next expected key is usually the one present.
  size_t cursor = 0;
  for (auto field : simdjson::dom::object(element)) {
    size_t idx = n_expected;
    if (cursor < n_expected && expected[cursor] == field.key) {
      idx = cursor;
    } else {
      for (size_t i = 0; i < n_expected; ++i) {
        if (expected[i] == field.key) {
          idx = i;
          break;
        }
      }
    }
    cursor = idx + 1;
    if (idx == n_expected) {
      return Status::InvalidArgument(
          path.ToString() + ": " + std::string(what) +
          " schema fields do not match contract: unknown field \"" +
          Printable(field.key) + "\"");
    }
    if (seen[idx]) {
      return Status::InvalidArgument(path.ToString() +
                                     ": duplicate JSON field \"" +
                                     Printable(field.key) + "\"");
    }
    seen[idx] = true;
    obj.keys_[obj.size_] = expected[idx];
    obj.values_[obj.size_] = field.value;
    ++obj.size_;
  }
  for (size_t i = 0; i < required.size(); ++i) {
    if (!seen[i]) {
      return Status::InvalidArgument(
          path.ToString() + ": " + std::string(what) +
          " schema fields do not match contract: missing field \"" +
          std::string(expected[i]) + "\"");
    }
  }
  return obj;
}

template <size_t N>
std::optional<JsonElement> BasicStrictObject<N>::Find(
    std::string_view key) const {
  for (size_t i = 0; i < size_; ++i) {
    if (keys_[i] == key) return values_[i];
  }
  return std::nullopt;
}

template <size_t N>
Result<std::string_view> BasicStrictObject<N>::String(
    std::string_view key) const {
  return ReadString(Get(key), path_.Field(key));
}

template <size_t N>
Result<std::string_view> BasicStrictObject<N>::NonEmptyString(
    std::string_view key) const {
  return ReadNonEmptyString(Get(key), path_.Field(key));
}

template <size_t N>
Result<std::string> BasicStrictObject<N>::Id(std::string_view key) const {
  RESHARD_ASSIGN_OR_RETURN(std::string_view v, NonEmptyString(key));
  return std::string(v);
}

template <size_t N>
Result<int64_t> BasicStrictObject<N>::I64(std::string_view key) const {
  return ReadInt(Get(key), path_.Field(key));
}

template <size_t N>
Result<uint64_t> BasicStrictObject<N>::U64(std::string_view key) const {
  return ReadU64(Get(key), path_.Field(key));
}

template <size_t N>
Result<bool> BasicStrictObject<N>::Bool(std::string_view key) const {
  return ReadBool(Get(key), path_.Field(key));
}

template <size_t N>
Result<std::optional<int64_t>> BasicStrictObject<N>::OptionalI64(
    std::string_view key) const {
  const std::optional<JsonElement> v = Find(key);
  if (!v.has_value()) return std::optional<int64_t>();
  return ReadNullableInt(*v, path_.Field(key));
}

template <size_t N>
Result<Dims> BasicStrictObject<N>::IntArray(std::string_view key) const {
  return ReadIntArray(Get(key), path_.Field(key));
}

template <size_t N>
Result<std::vector<std::string>> BasicStrictObject<N>::StringArray(
    std::string_view key) const {
  return ReadStringArray(Get(key), path_.Field(key));
}

template <size_t N>
Result<JsonArray> BasicStrictObject<N>::Array(std::string_view key) const {
  const JsonPath field = path_.Field(key);
  RESHARD_ASSIGN_OR_RETURN(simdjson::dom::array a, ReadArray(Get(key), field));
  return JsonArray(a, field);
}

template <size_t N>
Result<BasicStrictObject<16>> BasicStrictObject<N>::Object(
    std::string_view key, std::string_view what,
    std::initializer_list<std::string_view> required,
    std::initializer_list<std::string_view> optional) const {
  return BasicStrictObject<16>::Make(Get(key), path_.Field(key), what, required,
                                     optional);
}

template class BasicStrictObject<16>;
template class BasicStrictObject<32>;

template <size_t N>
Result<std::string> ReadIdField(const BasicStrictObject<N>& obj,
                                std::string_view key, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(std::string_view v,
                           ReadNonEmptyString(obj.Get(key), path.Field(key)));
  return std::string(v);
}

template Result<std::string> ReadIdField(const BasicStrictObject<16>&,
                                         std::string_view, const JsonPath&);
template Result<std::string> ReadIdField(const BasicStrictObject<32>&,
                                         std::string_view, const JsonPath&);

Result<std::string_view> ReadString(JsonElement e, const JsonPath& path) {
  if (e.type() != element_type::STRING) {
    return TypeError(path, "must be a string");
  }
  return std::string_view(e);
}

Result<std::string_view> ReadNonEmptyString(JsonElement e,
                                            const JsonPath& path) {
  if (e.type() != element_type::STRING || std::string_view(e).empty()) {
    return TypeError(path, "must be a non-empty string");
  }
  return std::string_view(e);
}

Result<int64_t> ReadInt(JsonElement e, const JsonPath& path) {
  switch (e.type()) {
    case element_type::INT64:
      return int64_t(e);
    case element_type::UINT64:
      return TypeError(path, "must fit in a signed 64-bit integer");
    default:
      return TypeError(path, "must be an integer");
  }
}

Result<uint64_t> ReadU64(JsonElement e, const JsonPath& path) {
  switch (e.type()) {
    case element_type::INT64: {
      const int64_t v = int64_t(e);
      if (v < 0) {
        return TypeError(path, "must fit in an unsigned 64-bit integer");
      }
      return static_cast<uint64_t>(v);
    }
    case element_type::UINT64:
      return uint64_t(e);
    default:
      return TypeError(path, "must be an integer");
  }
}

Result<bool> ReadBool(JsonElement e, const JsonPath& path) {
  if (e.type() != element_type::BOOL)
    return TypeError(path, "must be a boolean");
  return bool(e);
}

Result<std::optional<int64_t>> ReadNullableInt(JsonElement e,
                                               const JsonPath& path) {
  if (e.type() == element_type::NULL_VALUE) {
    return std::optional<int64_t>();
  }
  RESHARD_ASSIGN_OR_RETURN(int64_t v, ReadInt(e, path));
  return std::optional<int64_t>(v);
}

Result<simdjson::dom::array> ReadArray(JsonElement e, const JsonPath& path) {
  if (e.type() != element_type::ARRAY) {
    return TypeError(path, "must be an array");
  }
  return simdjson::dom::array(e);
}

Result<Dims> ReadIntArray(JsonElement e, const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto arr, ReadArray(e, path));
  Dims out;
  out.reserve(arr.size());
  size_t i = 0;
  for (auto item : arr) {
    if (item.type() != element_type::INT64) {
      RESHARD_ASSIGN_OR_RETURN(int64_t v, ReadInt(item, path.Index(i)));
      out.push_back(v);
    } else {
      out.push_back(int64_t(item));
    }
    ++i;
  }
  return out;
}

Result<std::vector<std::string>> ReadStringArray(JsonElement e,
                                                 const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto arr, ReadArray(e, path));
  std::vector<std::string> out;
  out.reserve(arr.size());
  size_t i = 0;
  for (auto item : arr) {
    RESHARD_ASSIGN_OR_RETURN(std::string_view s,
                             ReadString(item, path.Index(i++)));
    out.emplace_back(s);
  }
  return out;
}

Result<std::string> CanonicalizeJsonText(std::string_view text,
                                         JsonAscii mode) {
  RESHARD_ASSIGN_OR_RETURN(JsonDocument doc, JsonDocument::Parse(text));
  std::string out;
  out.reserve(text.size());
  CanonicalJsonWriter writer(&out, mode);
  Status error;
  JsonPath root;
  WriteCanonical(doc.root(), &writer, &error, root);
  RESHARD_RETURN_NOT_OK(error);
  return out;
}

}  // namespace reshard::internal

namespace reshard {

Result<std::string> CanonicalizeJson(std::string_view text, JsonAscii mode) {
  return internal::CanonicalizeJsonText(text, mode);
}

}  // namespace reshard
