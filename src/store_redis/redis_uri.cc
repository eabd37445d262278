#include "store_redis/redis_uri.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "reshard/sdk/backend_registry.h"

namespace reshard::internal {
namespace {

Status Bad(std::string_view redacted, const std::string& why) {
  return Status::InvalidArgument("invalid Redis URI \"" +
                                 std::string(redacted) + "\": " + why);
}

// A decimal in [0, max]; nullopt-like false on anything else.
bool ParseNumber(std::string_view text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out <= max;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes user or password text.
bool Decode(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out->push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return false;
    const int hi = HexDigit(text[i + 1]);
    const int lo = HexDigit(text[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

bool ValidPrefix(std::string_view p) {
  if (p.empty() || p.size() > 128) return false;
  for (char c : p) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == '~' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

Status ParseQuery(std::string_view query, bool unix_socket, RedisUri* out) {
  std::set<std::string> seen;
  while (!query.empty()) {
    const size_t amp = std::min(query.find('&'), query.size());
    const std::string_view item = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Bad(out->redacted, "option \"" + std::string(item) +
                                    "\" has no value (want name=value)");
    }
    const std::string name(item.substr(0, eq));
    const std::string_view value = item.substr(eq + 1);
    if (!seen.insert(name).second) {
      return Bad(out->redacted, "option \"" + name + "\" given twice");
    }
    uint64_t n = 0;
    if (name == "prefix") {
      if (!ValidPrefix(value)) {
        return Bad(out->redacted,
                   "prefix must be 1-128 characters of [A-Za-z0-9._~/-] (no "
                   "':', which separates a prefix from the store's own keys)");
      }
      out->prefix = std::string(value);
    } else if (name == "sync") {
      if (value != "fsync" && value != "none") {
        return Bad(out->redacted, "sync must be fsync or none");
      }
      out->require_fsync = value == "fsync";
    } else if (name == "replicas") {
      if (!ParseNumber(value, 1024, &n)) {
        return Bad(out->redacted, "replicas must be an integer in [0, 1024]");
      }
      out->replicas = static_cast<uint32_t>(n);
    } else if (name == "db" && unix_socket) {
      if (!ParseNumber(value, 1u << 20, &n)) {
        return Bad(out->redacted, "db must be a database number");
      }
      out->db = static_cast<uint32_t>(n);
    } else {
      return Bad(out->redacted, "unknown option \"" + name +
                                    "\" (supported: prefix, sync, replicas" +
                                    (unix_socket ? ", db)" : ")"));
    }
  }
  return Status::OK();
}

Status ParseTcp(std::string_view rest, RedisUri* out) {
  // The user information ends at the last '@' (no valid host, database or
  // option holds one); an unencoded delimiter in it would move the host.
  const size_t at = rest.rfind('@');
  const std::string_view info =
      at == std::string_view::npos ? std::string_view() : rest.substr(0, at);
  if (info.find_first_of("/?#@") != std::string_view::npos) {
    return Bad(out->redacted,
               "the user or password holds an unencoded '/', '?', '#' or "
               "'@'; percent-encode it (%2F, %3F, %23, %40)");
  }
  if (at != std::string_view::npos) rest.remove_prefix(at + 1);
  const size_t end = std::min(rest.find_first_of("/?"), rest.size());
  std::string_view authority = rest.substr(0, end);
  std::string_view tail = rest.substr(end);
  if (at != std::string_view::npos) {
    const size_t colon = info.find(':');
    const std::string_view user = info.substr(0, colon);
    const std::string_view pass =
        colon == std::string_view::npos ? "" : info.substr(colon + 1);
    if (!Decode(user, &out->user) || !Decode(pass, &out->password)) {
      return Bad(out->redacted, "bad percent-escape in user or password");
    }
    if (colon == std::string_view::npos) std::swap(out->user, out->password);
  }
  std::string_view port_text;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return Bad(out->redacted, "unterminated [IPv6] host");
    }
    out->host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (authority.starts_with(':'))
      port_text = authority.substr(1);
    else if (!authority.empty())
      return Bad(out->redacted, "bad host:port");
  } else {
    const size_t colon = authority.rfind(':');
    out->host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos)
      port_text = authority.substr(colon + 1);
  }
  if (out->host.empty()) return Bad(out->redacted, "no host");
  uint64_t n = 6379;
  if (!port_text.empty() && (!ParseNumber(port_text, 65535, &n) || n == 0)) {
    return Bad(out->redacted, "port must be an integer in [1, 65535]");
  }
  out->port = static_cast<uint16_t>(n);
  if (tail.starts_with('/')) {
    const size_t q = std::min(tail.find('?'), tail.size());
    const std::string_view db = tail.substr(1, q - 1);
    if (!db.empty()) {
      if (!ParseNumber(db, 1u << 20, &n)) {
        return Bad(out->redacted,
                   "database \"" + std::string(db) + "\" is not a number");
      }
      out->db = static_cast<uint32_t>(n);
    }
    tail.remove_prefix(q);
  }
  return ParseQuery(tail.empty() ? tail : tail.substr(1), false, out);
}

}  // namespace

std::string RedactUri(std::string_view uri) { return RedactUriPassword(uri); }

Result<RedisUri> ParseRedisUri(std::string_view uri) {
  RedisUri out;
  out.redacted = RedactUri(uri);
  for (unsigned char c : uri) {
    if (c < 0x21 || c > 0x7e) {
      return Bad(out.redacted, "contains a space or control character");
    }
  }
  if (uri.starts_with("redis://")) {
    RESHARD_RETURN_NOT_OK(ParseTcp(uri.substr(8), &out));
  } else if (uri.starts_with("unix://")) {
    std::string_view rest = uri.substr(7);
    const size_t q = std::min(rest.find('?'), rest.size());
    out.socket_path = std::string(rest.substr(0, q));
    if (!out.socket_path.starts_with('/')) {
      return Bad(out.redacted,
                 "the socket path must be absolute "
                 "(unix:///path/to/redis.sock)");
    }
    rest.remove_prefix(q);
    RESHARD_RETURN_NOT_OK(
        ParseQuery(rest.empty() ? rest : rest.substr(1), true, &out));
  } else {
    return Bad(out.redacted, "scheme must be redis:// or unix://");
  }
  if (out.password.empty()) {
    const char* env = std::getenv(kRedisPasswordEnv);
    if (env != nullptr) out.password = env;
  }
  return out;
}

}  // namespace reshard::internal
