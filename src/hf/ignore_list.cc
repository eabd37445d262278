#include "hf/ignore_list.h"

#include <algorithm>

#include "util/printable.h"

namespace reshard::internal {
namespace {

// Whether `p` (ECMAScript) quantifies a group that contains a quantifier or
// an alternation: "(a+)+", "(a|aa)*", "(?:x*){2,}". Escapes and bracket
// expressions are skipped; a quantifier is *, +, ? or {.
bool RepeatsARepeatingGroup(std::string_view p) {
  struct Group {
    bool repeats = false;
  };
  std::vector<Group> open;
  bool last_group_repeats = false;  // the group just closed
  bool after_group = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    const bool quantifier = ch == '*' || ch == '+' || ch == '?' || ch == '{';
    if (quantifier && after_group && last_group_repeats) return true;
    after_group = false;
    if (ch == '\\') {
      ++i;  // the escaped character
    } else if (ch == '[') {
      // A bracket expression ends at the first ']' after its first member.
      size_t j = i + 1;
      if (j < p.size() && p[j] == '^') ++j;
      if (j < p.size() && p[j] == ']') ++j;
      while (j < p.size() && p[j] != ']') j += p[j] == '\\' ? 2 : 1;
      i = j;
    } else if (ch == '(') {
      open.push_back({});
    } else if (ch == ')') {
      if (open.empty()) continue;  // std::regex refuses it
      last_group_repeats = open.back().repeats;
      open.pop_back();
      after_group = true;
      // The enclosing group repeats when this one does.
      if (!open.empty()) open.back().repeats |= last_group_repeats;
    } else if (quantifier || ch == '|') {
      // "(?:" is not a quantifier.
      if (ch == '?' && i > 0 && p[i - 1] == '(') continue;
      if (!open.empty()) open.back().repeats = true;
      if (ch == '{') {
        while (i < p.size() && p[i] != '}') ++i;
      }
    }
  }
  return false;
}

}  // namespace

Result<ModuleIgnoreList> ModuleIgnoreList::Make(
    std::vector<std::string> entries) {
  const std::string kField = "config.json: quantization_config.ignore";
  if (entries.size() > kMaxEntries) {
    return Status::InvalidArgument(
        kField + " has " + std::to_string(entries.size()) +
        " entries, more than " + std::to_string(kMaxEntries));
  }
  ModuleIgnoreList list;
  for (std::string& e : entries) {
    if (e.size() > kMaxEntryBytes) {
      return Status::InvalidArgument(kField + " entry " + Printable(e, 64) +
                                     " is longer than " +
                                     std::to_string(kMaxEntryBytes) + " bytes");
    }
    if (!e.starts_with("re:")) {
      list.names_.push_back(std::move(e));
      continue;
    }
    const std::string pattern = e.substr(3);
    if (RepeatsARepeatingGroup(pattern)) {
      return Status::InvalidArgument(
          kField + " entry " + Printable(e) +
          " repeats a group that itself repeats or alternates (refused: "
          "matching it can take exponential time)");
    }
    try {
      list.expressions_.push_back(std::make_shared<const std::regex>(
          pattern, std::regex::ECMAScript | std::regex::optimize));
    } catch (const std::regex_error&) {
      return Status::InvalidArgument(kField + " entry " + Printable(e) +
                                     " is not a regular expression");
    }
  }
  return list;
}

bool ModuleIgnoreList::Ignores(std::string_view module) const {
  if (std::find(names_.begin(), names_.end(), module) != names_.end()) {
    return true;
  }
  for (const auto& re : expressions_) {
    // Anchored at the start only, as Python's re.match.
    if (std::regex_search(module.begin(), module.end(), *re,
                          std::regex_constants::match_continuous)) {
      return true;
    }
  }
  return false;
}

}  // namespace reshard::internal
