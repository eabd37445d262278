// Making strings that came from input safe to print.
//
// Error messages echo field names, ids and keys read from files, records
// and peers. Printed raw, a control character could forge a second line
// ("reshard: ok: ...") or drive the terminal, and a 50 MB key would be
// copied into every message. Every Status message passes through
// SanitizeMessage; code that quotes one input string inside a message uses
// Printable to shorten it with its length stated.

#ifndef RESHARD_UTIL_PRINTABLE_H_
#define RESHARD_UTIL_PRINTABLE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace reshard::internal {

// The longest quoted input string kept whole by Printable.
inline constexpr size_t kMaxQuotedBytes = 256;
// The longest Status message kept whole.
inline constexpr size_t kMaxMessageBytes = 4096;

// Appends `s` to `out` with every byte that could change what a terminal
// or log shows escaped: C0 controls and DEL as \n, \r, \t, \e or \xNN, C1
// controls (U+0080..U+009F) and bidirectional overrides (U+202A..U+202E,
// U+2066..U+2069, U+200E, U+200F) as \u{XXXX}, bytes that are not UTF-8 as
// \xNN. Printable text, including other non-ASCII characters, is kept.
void AppendEscaped(std::string_view s, std::string* out);

// `s` escaped; if longer than `max_bytes`, its first `max_bytes` bytes (cut
// at a character boundary) then "... (N bytes)".
std::string Printable(std::string_view s, size_t max_bytes = kMaxQuotedBytes);

// A message escaped as by AppendEscaped and, past kMaxMessageBytes, cut to
// its head and tail with the number of omitted bytes stated in between.
std::string SanitizeMessage(std::string_view message);

// True if `s` needs no escaping (the common case; no allocation).
bool IsPrintable(std::string_view s);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_PRINTABLE_H_
