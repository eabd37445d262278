// A fresh directory under /tmp for one test, removed with everything in it
// when the owner goes away.

#ifndef RESHARD_TESTING_TEMP_DIR_H_
#define RESHARD_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace reshard::testing {

class TempDir {
 public:
  explicit TempDir(std::string_view name = "reshard-test") {
    std::string t = "/tmp/" + std::string(name) + "-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = t;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_TEMP_DIR_H_
