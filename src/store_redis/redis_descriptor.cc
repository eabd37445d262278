#include "store_redis/redis_descriptor.h"

#include <charconv>

namespace reshard::internal {
namespace {

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// A decimal without sign or leading zero that fits in 64 bits.
bool ParseDecimal(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0'))
    return false;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

bool ValidRedisToken(std::string_view token) {
  const size_t dash = token.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 8 ||
      token.size() != dash + 1 + 32) {
    return false;
  }
  for (size_t i = 0; i < token.size(); ++i) {
    if (i != dash && !IsHex(token[i])) return false;
  }
  return true;
}

std::optional<RedisDescriptor> ParseRedisDescriptor(std::string_view v) {
  if (!v.starts_with('c')) return std::nullopt;
  v.remove_prefix(1);
  const size_t a = v.find(' ');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = v.find(' ', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  RedisDescriptor d;
  if (!ParseDecimal(v.substr(0, a), &d.size) ||
      !ParseDecimal(v.substr(a + 1, b - a - 1), &d.chunk_bytes) ||
      d.chunk_bytes < kMinRedisChunkBytes ||
      d.chunk_bytes > kMaxRedisChunkBytes || d.size == 0 ||
      d.size / d.chunk_bytes > kMaxRedisChunks ||
      d.chunks() > kMaxRedisChunks) {
    return std::nullopt;
  }
  const std::string_view token = v.substr(b + 1);
  if (!ValidRedisToken(token)) return std::nullopt;
  d.token = std::string(token);
  return d;
}

std::string RenderRedisDescriptor(const RedisDescriptor& d) {
  return "c" + std::to_string(d.size) + " " + std::to_string(d.chunk_bytes) +
         " " + d.token;
}

}  // namespace reshard::internal
