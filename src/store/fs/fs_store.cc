// The filesystem backend (fs://PATH): one file per record or object under
// PATH, created as a temporary file, fsynced, published by link(2) (which
// never replaces, also on shared filesystems) and made durable by an fsync
// of its directory. Reads are positional, straight into caller memory.

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
#include <unordered_map>

#include "reshard/object_store.h"
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

class FsStore : public ObjectStore {
 public:
  explicit FsStore(std::string root)
      : root_(std::move(root)), uri_("fs://" + root_) {}

  const std::string& uri() const override { return uri_; }

  Status Put(std::string_view key, std::string_view value) override {
    return PutObject(key, {ConstBuffer{value.data(), value.size()}});
  }

  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   bool durable = true) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    const std::string dir = fs::path(path).parent_path().string();
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      return Status::InvalidArgument("record key " + std::string(key) +
                                     " names a directory of records");
    }
    // A unique temporary name beside the target (same filesystem), unique
    // also across hosts and containers sharing the filesystem. A concurrent
    // Delete may prune the directory between its creation and our open:
    // retry both (once the temporary file exists, the directory is
    // non-empty and stays).
    const std::string tmp = dir + "/.tmp." + UniqueSuffix();
    int fd = -1;
    bool created = false;
    for (int attempt = 0; fd < 0 && attempt < 64; ++attempt) {
      created = fs::create_directories(dir, ec) || created;
      if (ec && attempt + 1 < 64) continue;
      if (ec) {
        return Status::IOError("cannot create directory " + dir + ": " +
                               ec.message());
      }
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno != ENOENT) break;
    }
    if (fd >= 0 && created && durable) {
      // Make the new directories themselves durable.
      for (fs::path d = fs::path(dir).parent_path();
           d.string().size() >= root_.size(); d = d.parent_path()) {
        Status synced = SyncDirectory(d.string());
        if (!synced.ok()) {
          ::close(fd);
          ::unlink(tmp.c_str());
          return synced;
        }
        if (d.string().size() == root_.size()) break;
      }
    }
    if (fd < 0) return Errno("cannot create", tmp);
    Status st;
    for (const ConstBuffer& part : parts) {
      if (!st.ok()) break;
      st = WriteAll(
          fd, std::string_view(static_cast<const char*>(part.data), part.size),
          tmp);
    }
    if (st.ok() && durable && ::fsync(fd) != 0) {
      st = Errno("cannot sync", tmp);
    }
    ::close(fd);
    if (st.ok() && ::link(tmp.c_str(), path.c_str()) != 0) {
      st = errno == EEXIST
               ? Status::AlreadyExists("record exists: " + std::string(key))
               : Errno("cannot publish", path);
    }
    ::unlink(tmp.c_str());
    RETURN_NOT_OK(st);
    return durable ? SyncDirectory(dir) : Status::OK();
  }

  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override {
    uint64_t removed = 0;
    const auto now = fs::file_time_type::clock::now();
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code e2;
      const std::string name = it->path().filename().string();
      if (!name.starts_with(".tmp.") || !it->is_regular_file(e2)) continue;
      const auto mtime = fs::last_write_time(it->path(), e2);
      if (e2 || now - mtime < older_than) continue;
      if (fs::remove(it->path(), e2)) ++removed;
    }
    return removed;
  }

  // One filesystem-wide flush: data, inodes and directory entries of
  // everything written so far.
  Status Sync() override {
    const int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", root_);
    const int rc = ::syncfs(fd);
    ::close(fd);
    if (rc != 0) return Errno("cannot sync filesystem of", root_);
    return Status::OK();
  }

  Result<std::string> Get(std::string_view key) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    const int fd = OpenRegular(path);
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
    // Our own walk: directories that vanish under a concurrent Delete are
    // skipped, not errors.
    std::vector<std::string> todo{dir};
    while (!todo.empty()) {
      const std::string d = std::move(todo.back());
      todo.pop_back();
      std::error_code ec;
      fs::directory_iterator it(d, ec), end;
      if (ec) {
        if (ec == std::errc::no_such_file_or_directory ||
            ec == std::errc::not_a_directory) {
          continue;
        }
        return Status::IOError("cannot list " + d + ": " + ec.message());
      }
      for (; it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(".")) continue;
        std::error_code type_ec;
        if (it->is_directory(type_ec)) {
          todo.push_back(it->path().string());
          continue;
        }
        if (!it->is_regular_file(type_ec)) continue;
        std::string key = it->path().string().substr(root_.size() + 1);
        if (key.starts_with(prefix)) keys.push_back(std::move(key));
      }
      if (ec && ec != std::errc::no_such_file_or_directory) {
        return Status::IOError("cannot list " + d + ": " + ec.message());
      }
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  // Opens every object once and checks every range against its size before
  // reading anything, then reads the ranges in order, each straight into
  // caller memory. One reader: on this machine's virtio disk, 4 threads
  // made cold reads slower (readahead is per stream).
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    struct Open {
      int fd;
      uint64_t size;
    };
    std::unordered_map<std::string_view, Open> files;
    std::vector<int> fds;  // per range
    Status st;
    for (const ReadRange& r : ranges) {
      auto it = files.find(r.key);
      if (it == files.end()) {
        st = ValidateRecordKey(r.key);
        if (!st.ok()) break;
        const std::string path = PathOf(r.key);
        uint64_t size = 0;
        const int fd = OpenRegular(path, &size);
        if (fd < 0) {
          st = errno == ENOENT || errno == ENOTDIR || errno == EISDIR
                   ? Status::NotFound("no object " + r.key)
                   : Errno("cannot open", path);
          break;
        }
        // Loads read each object front to back: a larger readahead.
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        it = files.emplace(r.key, Open{fd, size}).first;
      }
      if (r.offset + r.length > it->second.size ||
          r.offset + r.length < r.offset) {
        st = Status::DataLoss("object " + r.key + " is short: range [" +
                              std::to_string(r.offset) + ", " +
                              std::to_string(r.offset + r.length) +
                              ") is past its end (" +
                              std::to_string(it->second.size) + " bytes)");
        break;
      }
      fds.push_back(it->second.fd);
    }
    for (size_t i = 0; st.ok() && i < ranges.size(); ++i) {
      st = ReadAll(ranges[i], fds[i]);
    }
    for (const auto& [k, f] : files) ::close(f.fd);
    return st;
  }

  Result<uint64_t> ObjectSize(std::string_view key) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    struct stat sb;
    const std::string path = PathOf(key);
    if (::stat(path.c_str(), &sb) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        return Status::NotFound("no object " + std::string(key));
      }
      return Errno("cannot stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
      return Status::NotFound("no object " + std::string(key));
    }
    return static_cast<uint64_t>(sb.st_size);
  }

  Status Delete(std::string_view key) override {
    RETURN_NOT_OK(ValidateRecordKey(key));
    const std::string path = PathOf(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR &&
        errno != EISDIR) {
      return Errno("cannot delete", path);
    }
    // Prune directories left empty (a Put racing with this retries).
    for (fs::path d = fs::path(path).parent_path();
         d.string().size() > root_.size(); d = d.parent_path()) {
      if (::rmdir(d.c_str()) != 0) break;
    }
    return Status::OK();
  }

 private:
  // Reads all of `r` from `fd`; DataLoss if the object ends early (it
  // shrank after the size check).
  Status ReadAll(const ReadRange& r, int fd) const {
    auto* dest = static_cast<char*>(r.dest);
    uint64_t done = 0;
    while (done < r.length) {
      const ssize_t n = ::pread(fd, dest + done, r.length - done,
                                static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("cannot read", PathOf(r.key));
      if (n == 0) {
        return Status::DataLoss("object " + r.key + " is short: range [" +
                                std::to_string(r.offset) + ", " +
                                std::to_string(r.offset + r.length) +
                                ") ends after " +
                                std::to_string(r.offset + done) + " bytes");
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::OK();
  }

  // Opens a regular file for reading (and tells its size); a directory
  // fails with EISDIR.
  static int OpenRegular(const std::string& path, uint64_t* size = nullptr) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fd;
    struct stat sb;
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      ::close(fd);
      errno = EISDIR;
      return -1;
    }
    if (size != nullptr) *size = static_cast<uint64_t>(sb.st_size);
    return fd;
  }

  std::string PathOf(std::string_view key) const {
    return root_ + "/" + std::string(key);
  }

  std::string root_;
  std::string uri_;
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
                      c == '~' || c == '%' || c == '-';
      if (!ok) return bad("characters other than [A-Za-z0-9._~%-]");
    }
    if (end == key.size()) break;
    begin = end + 1;
  }
  return Status::OK();
}

namespace {

Result<std::unique_ptr<FsStore>> OpenFsStore(const std::string& root) {
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
  return std::make_unique<FsStore>(normal);
}

}  // namespace

Result<std::unique_ptr<RecordStore>> OpenDirectoryRecordStore(
    const std::string& root) {
  ASSIGN_OR_RETURN(auto store, OpenFsStore(root));
  return std::unique_ptr<RecordStore>(std::move(store));
}

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(std::string_view uri) {
  std::string_view path = uri;
  if (uri.starts_with("fs://")) {
    path.remove_prefix(5);
  } else if (uri.find("://") != std::string_view::npos) {
    return Status::InvalidArgument("unsupported store URI \"" +
                                   std::string(uri) +
                                   "\" (supported: fs://PATH)");
  }
  if (path.empty()) {
    return Status::InvalidArgument("store URI \"" + std::string(uri) +
                                   "\" names no directory");
  }
  ASSIGN_OR_RETURN(auto store, OpenFsStore(std::string(path)));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace reshard
