// RecordStore over a directory: one file per record, create-only publication
// by link(2).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "reshard/record_store.h"

namespace reshard {
namespace {

namespace fs = std::filesystem;

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

// Writes all of `data` to `fd`.
Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot sync directory", dir);
  return Status::OK();
}

// pid, host and random bits: temporary names never collide, also between
// hosts or containers that share the filesystem.
std::string UniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t random = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  char host[64] = "host";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s.%d.%016llx.%llu", host, ::getpid(),
                static_cast<unsigned long long>(random),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

class DirectoryRecordStore : public RecordStore {
 public:
  explicit DirectoryRecordStore(std::string root) : root_(std::move(root)) {}

  Status Put(std::string_view key, std::string_view value) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    const std::string dir = fs::path(path).parent_path().string();
    std::error_code ec;
    const bool created = fs::create_directories(dir, ec);
    if (ec) {
      return Status::IOError("cannot create directory " + dir + ": " +
                             ec.message());
    }
    if (created) {
      // Make the new directories themselves durable.
      for (fs::path d = fs::path(dir).parent_path();
           d.string().size() >= root_.size(); d = d.parent_path()) {
        RETURN_NOT_OK(SyncDirectory(d.string()));
        if (d.string().size() == root_.size()) break;
      }
    }
    if (fs::is_directory(path, ec)) {
      return Status::InvalidArgument("record key " + std::string(key) +
                                     " names a directory of records");
    }
    // A unique temporary name beside the target (same filesystem), unique
    // also across hosts and containers sharing the filesystem.
    const std::string tmp = dir + "/.tmp." + UniqueSuffix();
    const int fd =
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("cannot create", tmp);
    Status st = WriteAll(fd, value, tmp);
    if (st.ok() && ::fsync(fd) != 0) st = Errno("cannot sync", tmp);
    ::close(fd);
    if (st.ok() && ::link(tmp.c_str(), path.c_str()) != 0) {
      st = errno == EEXIST
               ? Status::AlreadyExists("record exists: " + std::string(key))
               : Errno("cannot publish", path);
    }
    ::unlink(tmp.c_str());
    RETURN_NOT_OK(st);
    return SyncDirectory(dir);
  }

  Result<std::string> Get(std::string_view key) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) {
        return Status::NotFound("no record " + std::string(key));
      }
      return Errno("cannot open", path);
    }
    std::string out;
    char buf[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        Status st = Errno("cannot read", path);
        ::close(fd);
        return st;
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::string_view whole = prefix;
    if (whole.ends_with('/')) whole.remove_suffix(1);
    if (!whole.empty()) RETURN_NOT_OK(ValidateRecordKey(whole));
    // Walk the deepest directory the prefix names completely.
    const size_t slash = prefix.rfind('/');
    const std::string base(
        slash == std::string_view::npos ? "" : prefix.substr(0, slash));
    const std::string dir = base.empty() ? root_ : root_ + "/" + base;
    std::vector<std::string> keys;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return keys;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code type_ec;  // entries may vanish while we list
      if (name.starts_with(".")) {
        if (it->is_directory(type_ec)) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(type_ec)) continue;
      std::string key = it->path().string().substr(root_.size() + 1);
      if (key.starts_with(prefix)) keys.push_back(std::move(key));
    }
    if (ec) {
      return Status::IOError("cannot list " + dir + ": " + ec.message());
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status Delete(std::string_view key) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
      return Errno("cannot delete", path);
    }
    return Status::OK();
  }

 private:
  std::string PathOf(std::string_view key) const {
    return root_ + "/" + std::string(key);
  }

  std::string root_;
};

}  // namespace

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
                      c == '-';
      if (!ok) return bad("characters other than [A-Za-z0-9._-]");
    }
    if (end == key.size()) break;
    begin = end + 1;
  }
  return Status::OK();
}

Result<std::unique_ptr<RecordStore>> OpenDirectoryRecordStore(
    const std::string& root) {
  if (root.empty()) {
    return Status::InvalidArgument("record store directory is empty");
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    return Status::IOError("cannot create record store directory " + root +
                           (ec ? ": " + ec.message() : ""));
  }
  std::string normal = fs::absolute(root).lexically_normal().string();
  while (normal.size() > 1 && normal.ends_with('/')) normal.pop_back();
  return std::unique_ptr<RecordStore>(new DirectoryRecordStore(normal));
}

}  // namespace reshard
