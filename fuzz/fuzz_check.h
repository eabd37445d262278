// Helpers shared by the libFuzzer targets: a property check that aborts
// (libFuzzer then saves the input as a crash artifact) and input splitting.

#ifndef RESHARD_FUZZ_FUZZ_CHECK_H_
#define RESHARD_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

// Aborts with `what` when a property the decoder promises does not hold.
#define FUZZ_CHECK(cond, what)                                               \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "fuzz property failed: %s (%s) at %s:%d\n", what, \
                   #cond, __FILE__, __LINE__);                               \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

namespace reshard::fuzz {

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits `input` at every NUL byte (documents of the multi-document targets
// are separated by one NUL; JSON text never contains a raw NUL).
inline std::vector<std::string_view> SplitAtNul(std::string_view input) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    const size_t end = input.find('\0', pos);
    if (end == std::string_view::npos) {
      out.push_back(input.substr(pos));
      return out;
    }
    out.push_back(input.substr(pos, end - pos));
    pos = end + 1;
  }
}

}  // namespace reshard::fuzz

#endif  // RESHARD_FUZZ_FUZZ_CHECK_H_
