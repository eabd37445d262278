// Writing a padding piece: zeros, or a fill piece's element repeated.

#ifndef RESHARD_ENGINE_PADDING_H_
#define RESHARD_ENGINE_PADDING_H_

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "reshard/engine.h"

namespace reshard::internal {

// Writes padding piece `piece` of the parameter at `base` (host memory):
// zeros, or `piece.fill` repeated over its bytes (EngineLayout::Make checks
// that the fill is one element and the piece whole elements).
inline void WritePadding(void* base, const ParameterPiece& piece) {
  auto* at = static_cast<char*>(base) + piece.offset;
  const size_t n = piece.fill.size();
  if (n == 0) {
    std::memset(at, 0, piece.nbytes);
    return;
  }
  for (uint64_t i = 0; i + n <= piece.nbytes; i += n) {
    std::memcpy(at + i, piece.fill.data(), n);
  }
}

// Lowercase hex of `bytes` (a fill's form in the maps' JSON).
inline std::string HexOf(std::string_view bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  }
  return out;
}

// The bytes of lowercase hex `hex`; nullopt for an odd length or any
// other character (uppercase included: one spelling per fill).
inline std::optional<std::string> BytesOfHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_PADDING_H_
