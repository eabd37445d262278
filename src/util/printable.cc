#include "util/printable.h"

#include <cstdint>
#include <cstdio>

namespace reshard::internal {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] and its code point, or
// 0 if the bytes there are not UTF-8 (overlong forms and surrogates
// included).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n;
  uint32_t v;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    n = 2, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, v = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, v = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if ((n == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
      (n == 4 && (v < 0x10000 || v > 0x10FFFF))) {
    return 0;
  }
  *cp = v;
  return n;
}

bool IsHiddenFormat(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

// Calls f(offset, length, code point or -1 for a byte that is not UTF-8,
// needs_escape) for each character of s.
template <typename F>
void ForEachChar(std::string_view s, F&& f) {
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) {
      if (!f(i, size_t{1}, -1, true)) return;
      ++i;
      continue;
    }
    const bool escape = cp < 0x20 || cp == 0x7F || IsHiddenFormat(cp);
    if (!f(i, n, static_cast<int64_t>(cp), escape)) return;
    i += n;
  }
}

void AppendChar(std::string_view s, size_t i, size_t n, int64_t cp, bool escape,
                std::string* out) {
  if (!escape) {
    out->append(s.substr(i, n));
    return;
  }
  char buf[16];
  switch (cp) {
    case '\n':
      out->append("\\n");
      return;
    case '\r':
      out->append("\\r");
      return;
    case '\t':
      out->append("\\t");
      return;
    case 0x1B:
      out->append("\\e");
      return;
    default:
      break;
  }
  if (cp < 0 || cp < 0x80) {
    const unsigned byte = static_cast<uint8_t>(s[i]);
    std::snprintf(buf, sizeof buf, "\\x%02x", byte);
  } else {
    std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(cp));
  }
  out->append(buf);
}

// The largest character boundary <= limit.
size_t BoundaryAtOrBefore(std::string_view s, size_t limit) {
  size_t cut = 0;
  ForEachChar(s, [&](size_t i, size_t n, int64_t, bool) {
    if (i + n > limit) return false;
    cut = i + n;
    return true;
  });
  return cut;
}

// The smallest character boundary >= from (scanning forward).
size_t BoundaryAtOrAfter(std::string_view s, size_t from) {
  size_t i = from;
  while (i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80 &&
         i < from + 3) {
    ++i;
  }
  return i;
}

}  // namespace

bool IsPrintable(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    if (c < 0x20 || c >= 0x7F) {
      // Non-ASCII: decide character by character.
      bool clean = true;
      ForEachChar(s, [&](size_t, size_t, int64_t, bool escape) {
        clean = !escape;
        return clean;
      });
      return clean;
    }
  }
  return true;
}

void AppendEscaped(std::string_view s, std::string* out) {
  if (IsPrintable(s)) {
    out->append(s);
    return;
  }
  ForEachChar(s, [&](size_t i, size_t n, int64_t cp, bool escape) {
    AppendChar(s, i, n, cp, escape, out);
    return true;
  });
}

std::string Printable(std::string_view s, size_t max_bytes) {
  std::string out;
  if (s.size() <= max_bytes) {
    AppendEscaped(s, &out);
    return out;
  }
  AppendEscaped(s.substr(0, BoundaryAtOrBefore(s, max_bytes)), &out);
  out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string SanitizeMessage(std::string_view message) {
  if (message.size() <= kMaxMessageBytes && IsPrintable(message)) {
    return std::string(message);
  }
  std::string out;
  if (message.size() <= kMaxMessageBytes) {
    AppendEscaped(message, &out);
    return out;
  }
  // Keep the head (which names the check) and the tail (which often names
  // the file or field); state what was left out.
  const size_t head = BoundaryAtOrBefore(message, kMaxMessageBytes * 3 / 4);
  const size_t tail =
      BoundaryAtOrAfter(message, message.size() - kMaxMessageBytes / 4);
  AppendEscaped(message.substr(0, head), &out);
  out += " ... [" + std::to_string(tail - head) + " bytes omitted] ... ";
  AppendEscaped(message.substr(tail), &out);
  return out;
}

}  // namespace reshard::internal
