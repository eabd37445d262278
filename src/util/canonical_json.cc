#include "util/canonical_json.h"

#include <cassert>
#include <charconv>

namespace reshard::internal {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendEscapedUnit(uint32_t unit, std::string* out) {
  char buf[6] = {'\\',
                 'u',
                 kHex[(unit >> 12) & 0xF],
                 kHex[(unit >> 8) & 0xF],
                 kHex[(unit >> 4) & 0xF],
                 kHex[unit & 0xF]};
  out->append(buf, 6);
}

// Decodes one UTF-8 sequence starting at s[i]; advances i. Input is valid
// UTF-8 (guaranteed by the readers), so no error handling beyond bounds.
uint32_t DecodeUtf8(std::string_view s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  int len = b0 < 0xE0 ? 2 : (b0 < 0xF0 ? 3 : 4);
  uint32_t cp = b0 & (len == 2 ? 0x1F : (len == 3 ? 0x0F : 0x07));
  for (int k = 1; k < len && *i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  }
  *i += len;
  return cp;
}

// kNeedsEscape[mode][byte]: true when the byte cannot be copied verbatim.
struct EscapeTable {
  bool ascii[256];
  bool raw[256];
  constexpr EscapeTable() : ascii(), raw() {
    for (int c = 0; c < 256; ++c) {
      const bool special = c < 0x20 || c == '"' || c == '\\';
      raw[c] = special;
      ascii[c] = special || c >= 0x7F;
    }
  }
};
constexpr EscapeTable kEscape;

}  // namespace

void AppendJsonString(std::string_view utf8, JsonAscii mode, std::string* out) {
  out->push_back('"');
  size_t run_start = 0;
  size_t i = 0;
  const bool* needs_escape =
      mode == JsonAscii::kEscapeNonAscii ? kEscape.ascii : kEscape.raw;
  while (i < utf8.size()) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (!needs_escape[c]) {
      ++i;
      continue;
    }
    out->append(utf8.data() + run_start, i - run_start);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out->append("\\\"");
          break;
        case '\\':
          out->append("\\\\");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        default:
          AppendEscapedUnit(c, out);
          break;  // other controls, DEL
      }
      ++i;
    } else {
      const uint32_t cp = DecodeUtf8(utf8, &i);
      if (cp < 0x10000) {
        AppendEscapedUnit(cp, out);
      } else {
        const uint32_t v = cp - 0x10000;
        AppendEscapedUnit(0xD800 | (v >> 10), out);
        AppendEscapedUnit(0xDC00 | (v & 0x3FF), out);
      }
    }
    run_start = i;
  }
  out->append(utf8.data() + run_start, i - run_start);
  out->push_back('"');
}

void CanonicalJsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_->push_back(',');
    has_element_.back() = true;
  }
}

void CanonicalJsonWriter::BeginObject() {
  BeforeValue();
  out_->push_back('{');
  has_element_.push_back(false);
#ifndef NDEBUG
  last_key_.emplace_back();
#endif
}

void CanonicalJsonWriter::EndObject() {
  out_->push_back('}');
  has_element_.pop_back();
#ifndef NDEBUG
  last_key_.pop_back();
#endif
}

void CanonicalJsonWriter::BeginArray() {
  BeforeValue();
  out_->push_back('[');
  has_element_.push_back(false);
#ifndef NDEBUG
  last_key_.emplace_back();
#endif
}

void CanonicalJsonWriter::EndArray() {
  out_->push_back(']');
  has_element_.pop_back();
#ifndef NDEBUG
  last_key_.pop_back();
#endif
}

void CanonicalJsonWriter::Key(std::string_view key) {
#ifndef NDEBUG
  assert((last_key_.back().empty() || last_key_.back() < key) &&
         "canonical JSON keys must be emitted in ascending order");
  last_key_.back().assign(key);
#endif
  if (has_element_.back()) out_->push_back(',');
  has_element_.back() = true;
  const bool* needs_escape =
      mode_ == JsonAscii::kEscapeNonAscii ? kEscape.ascii : kEscape.raw;
  bool plain = true;
  for (char c : key) plain &= !needs_escape[static_cast<unsigned char>(c)];
  if (plain) {  // the typed encoders' literal keys
    out_->push_back('"');
    out_->append(key);
    out_->append("\":", 2);
  } else {
    AppendJsonString(key, mode_, out_);
    out_->push_back(':');
  }
  after_key_ = true;
}

void CanonicalJsonWriter::String(std::string_view value) {
  BeforeValue();
  AppendJsonString(value, mode_, out_);
}

void CanonicalJsonWriter::Int(int64_t value) {
  BeforeValue();
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  out_->append(buf, res.ptr);
}

void CanonicalJsonWriter::UInt(uint64_t value) {
  BeforeValue();
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  out_->append(buf, res.ptr);
}

void CanonicalJsonWriter::Bool(bool value) {
  BeforeValue();
  out_->append(value ? "true" : "false");
}

void CanonicalJsonWriter::Null() {
  BeforeValue();
  out_->append("null");
}

void CanonicalJsonWriter::Raw(std::string_view json) {
  BeforeValue();
  out_->append(json);
}

void CanonicalJsonWriter::IntArray(std::span<const int64_t> values) {
  BeginArray();
  for (int64_t v : values) Int(v);
  EndArray();
}

}  // namespace reshard::internal
