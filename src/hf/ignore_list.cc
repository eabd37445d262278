#include "hf/ignore_list.h"

#include <re2/re2.h>

#include <algorithm>

#include "util/printable.h"

namespace reshard::internal {
namespace {

constexpr std::string_view kField = "config.json: quantization_config.ignore";

// Why RE2 refused `pattern`: constructs Python's re has and RE2 cannot
// match in linear time get a reason of their own, the rest RE2's words.
std::string RefusalReason(const std::string& pattern, const re2::RE2& re) {
  for (std::string_view look : {"(?=", "(?!", "(?<=", "(?<!"}) {
    if (pattern.find(look) != std::string::npos) {
      return "uses lookaround (" + std::string(look) +
             "), which cannot be matched in linear time";
    }
  }
  if (re.error_code() == re2::RE2::ErrorBadEscape) {
    const std::string& arg = re.error_arg();
    if (arg.size() == 2 && arg[0] == '\\' && arg[1] >= '1' && arg[1] <= '9') {
      return "uses a backreference (" + arg +
             "), which cannot be matched in linear time";
    }
  }
  if (pattern.find("(?P=") != std::string::npos) {
    return "uses a backreference ((?P=), which cannot be matched in linear "
           "time";
  }
  return "is not a regular expression (" + Printable(re.error()) + ")";
}

}  // namespace

Result<ModuleIgnoreList> ModuleIgnoreList::Make(
    std::vector<std::string> entries) {
  if (entries.size() > kMaxEntries) {
    return Status::InvalidArgument(
        std::string(kField) + " has " + std::to_string(entries.size()) +
        " entries, more than " + std::to_string(kMaxEntries));
  }
  ModuleIgnoreList list;
  re2::RE2::Options options;
  options.set_log_errors(false);  // refusals are returned, never printed
  for (std::string& e : entries) {
    if (e.size() > kMaxEntryBytes) {
      return Status::InvalidArgument(std::string(kField) + " entry " +
                                     Printable(e, 64) + " is longer than " +
                                     std::to_string(kMaxEntryBytes) + " bytes");
    }
    if (!e.starts_with("re:")) {
      list.names_.push_back(std::move(e));
      continue;
    }
    const std::string pattern = e.substr(3);
    auto re = std::make_shared<const re2::RE2>(pattern, options);
    if (!re->ok()) {
      return Status::InvalidArgument(std::string(kField) + " entry " +
                                     Printable(e) + " " +
                                     RefusalReason(pattern, *re));
    }
    list.expressions_.push_back(std::move(re));
  }
  return list;
}

bool ModuleIgnoreList::Ignores(std::string_view module) const {
  if (std::find(names_.begin(), names_.end(), module) != names_.end()) {
    return true;
  }
  const re2::StringPiece text(module.data(), module.size());
  for (const auto& re : expressions_) {
    // Anchored at the start only, as Python's re.match.
    if (re->Match(text, 0, text.size(), re2::RE2::ANCHOR_START, nullptr, 0)) {
      return true;
    }
  }
  return false;
}

}  // namespace reshard::internal
