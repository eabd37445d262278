// Key syntax shared by every record and object backend.

#include <algorithm>
#include <string>

#include "reshard/sdk/record_store.h"

namespace reshard {

Status ValidateRecordKey(std::string_view key) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("invalid record key \"" + std::string(key) +
                                   "\": " + why);
  };
  if (key.empty()) return bad("empty");
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(key.find('/', begin), key.size());
    const std::string_view part = key.substr(begin, end - begin);
    if (part.empty()) return bad("empty component");
    if (part.front() == '.') return bad("component starts with '.'");
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                      c == '~' || c == '%' || c == '-';
      if (!ok) return bad("characters other than [A-Za-z0-9._~%-]");
    }
    if (end == key.size()) break;
    begin = end + 1;
  }
  return Status::OK();
}

}  // namespace reshard
