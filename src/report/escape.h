// Escaping of strings the report takes from its input (tensor, participant
// and placement ids can hold any character, "</script>" and control
// characters included) and number formatting shared by its parts.

#ifndef RESHARD_REPORT_ESCAPE_H_
#define RESHARD_REPORT_ESCAPE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace reshard::internal {

// Appends `s` as HTML/XML text or attribute value (inside double or single
// quotes): & < > " ' as character references, and control characters,
// bidirectional overrides and bytes that are not UTF-8 made visible as
// escapes (\x01, \u{202E}) rather than passed to the page.
void AppendHtml(std::string_view s, std::string* out);
std::string Html(std::string_view s);

// JSON text made safe inside <script type="application/json">: every <, >
// and & (which valid JSON holds only inside strings) becomes \u003c,
// \u003e, \u0026, so no "</script>" or "<!--" can end the element.
std::string ScriptSafeJson(std::string_view json);

// "1.29 GiB", "768 B": binary units, two decimals past bytes.
std::string HumanBytes(uint64_t bytes);
// "1,385,174,272".
std::string GroupedDigits(uint64_t value);
// A finite double in shortest round-trip form ("12.5", "0.001"); JSON and
// SVG accept it.
std::string ShortDouble(double value);
// "2.41 s", "38.2 ms", "512 us".
std::string HumanSeconds(double seconds);

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_ESCAPE_H_
