#include "report/escape.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "util/printable.h"

namespace reshard::internal {

void AppendHtml(std::string_view s, std::string* out) {
  // Control characters and the like first (they never include & < > " '),
  // then the markup characters of the result.
  std::string visible;
  std::string_view text = s;
  if (!IsPrintable(s)) {
    AppendEscaped(s, &visible);
    text = visible;
  }
  for (char c : text) {
    switch (c) {
      case '&':
        out->append("&amp;");
        break;
      case '<':
        out->append("&lt;");
        break;
      case '>':
        out->append("&gt;");
        break;
      case '"':
        out->append("&quot;");
        break;
      case '\'':
        out->append("&#39;");
        break;
      default:
        out->push_back(c);
    }
  }
}

std::string Html(std::string_view s) {
  std::string out;
  AppendHtml(s, &out);
  return out;
}

std::string ScriptSafeJson(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    switch (c) {
      case '<':
        out.append("\\u003c");
        break;
      case '>':
        out.append("\\u003e");
        break;
      case '&':
        out.append("\\u0026");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B",
                  static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

std::string GroupedDigits(uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string ShortDouble(double value) {
  if (!std::isfinite(value)) return "0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, res.ptr);
}

std::string HumanSeconds(double seconds) {
  char buf[48];
  if (seconds >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  } else if (seconds >= 1e-6) {
    std::snprintf(buf, sizeof(buf), "%.1f us", seconds * 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f ns", seconds * 1e9);
  }
  return buf;
}

}  // namespace reshard::internal
