// compressed-tensors' `ignore` list: the modules a quantization scheme
// leaves alone, each a module name or a "re:" regular expression matched
// from the start of the name (Python's re.match, as the loaders use).
//
// A downloaded config.json is untrusted input, so expressions are matched
// by RE2, whose time is linear in the name whatever the expression (no
// backtracking): there is no expression shape to guard against. The
// price is that constructs RE2 cannot match in linear time
// (backreferences, lookahead and lookbehind) are refused by name.

#ifndef RESHARD_HF_IGNORE_LIST_H_
#define RESHARD_HF_IGNORE_LIST_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace reshard::internal {

class ModuleIgnoreList {
 public:
  // At most this many entries, each at most kMaxEntryBytes long.
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxEntryBytes = 256;

  // Compiles every "re:" entry once. An expression that does not compile,
  // or that uses a backreference or lookaround, is InvalidArgument naming
  // the entry; so are too many or too long entries.
  static Result<ModuleIgnoreList> Make(std::vector<std::string> entries);

  // Whether `module` is a listed name or an expression matches its start.
  // Linear in the length of `module` for each expression.
  bool Ignores(std::string_view module) const;

  size_t size() const { return names_.size() + expressions_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<const re2::RE2>> expressions_;
};

}  // namespace reshard::internal

#endif  // RESHARD_HF_IGNORE_LIST_H_
