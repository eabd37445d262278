// compressed-tensors' `ignore` list: the modules a quantization scheme
// leaves alone, each a module name or a "re:" regular expression matched
// from the start of the name (Python's re.match, as the loaders use).

#ifndef RESHARD_HF_IGNORE_LIST_H_
#define RESHARD_HF_IGNORE_LIST_H_

#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace reshard::internal {

class ModuleIgnoreList {
 public:
  // At most this many entries, each at most kMaxEntryBytes long.
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxEntryBytes = 256;

  // Compiles every "re:" entry once. An expression that does not compile,
  // or that repeats a group which itself repeats or alternates (a shape
  // whose matching can take exponential time: "re:(a+)+$"), is
  // InvalidArgument naming the entry; so are too many or too long entries.
  static Result<ModuleIgnoreList> Make(std::vector<std::string> entries);

  // Whether `module` is a listed name or an expression matches its start.
  bool Ignores(std::string_view module) const;

  size_t size() const { return names_.size() + expressions_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<const std::regex>> expressions_;
};

}  // namespace reshard::internal

#endif  // RESHARD_HF_IGNORE_LIST_H_
