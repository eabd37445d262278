// The filesystem backend (fs://PATH): one file per record or object under
// PATH, created as a temporary file, fsynced, published by link(2) (which
// never replaces, also on shared filesystems) and made durable by an fsync
// of its directory. Reads are positional, straight into caller memory.
//
// Confinement: the root directory is resolved once, when the store is
// opened (the path the user names may itself be a symbolic link), and held
// open. Every operation below it walks the key one component at a time
// with openat(O_NOFOLLOW) relative to the directory reached so far, creates
// with mkdirat/openat/linkat, and deletes with unlinkat on such a parent,
// so a symbolic link anywhere inside the store is never followed: nothing
// outside the root is ever read, written or removed. A link where a record,
// an object or a directory of keys should be is a corrupt entry: reads and
// writes through it fail with DataLoss naming it, List reports it as a key
// (without descending into it) and Delete removes the link itself only.

#include "reshard/backends/fs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/file_io.h"

namespace reshard {
namespace {

namespace fs = std::filesystem;

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

using UniqueFd = internal::FileDescriptor;

// Writes all of `data` to `fd`.
Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n =
        ::write(fd, data.data(),
                std::min<size_t>(data.size(), internal::kMaxWriteCall));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
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

// The '/'-separated components of a validated key, as views into it.
std::vector<std::string_view> Components(std::string_view key) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (begin <= key.size()) {
    const size_t end = std::min(key.find('/', begin), key.size());
    out.push_back(key.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// What a directory entry is, never following a link.
enum class Kind { kMissing, kRegular, kDirectory, kLink, kOther, kError };

Kind KindAt(int dir_fd, const std::string& name) {
  struct stat sb;
  if (::fstatat(dir_fd, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT || errno == ENOTDIR ? Kind::kMissing : Kind::kError;
  }
  if (S_ISREG(sb.st_mode)) return Kind::kRegular;
  if (S_ISDIR(sb.st_mode)) return Kind::kDirectory;
  if (S_ISLNK(sb.st_mode)) return Kind::kLink;
  return Kind::kOther;
}

// The directories of a key's parent, opened from the root without following
// links: dirs[i] is the directory named by the key's components [0, i].
struct DirChain {
  std::vector<UniqueFd> dirs;
  // The deepest directory (the root when the chain is empty).
  int Last(int root) const { return dirs.empty() ? root : dirs.back().get(); }
};

class FsStore : public ObjectStore {
 public:
  FsStore(std::string root, UniqueFd root_fd)
      : root_(std::move(root)),
        uri_("fs://" + root_),
        root_fd_(std::move(root_fd)) {}

  const std::string& uri() const override { return uri_; }

  Status Put(std::string_view key, std::string_view value) override {
    return PutObject(key, {ConstBuffer{value.data(), value.size()}},
                     record_durability_);
  }

  void set_record_durability(Durability d) { record_durability_ = d; }

  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability = Durability::kDurable) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    const bool durable = durability == Durability::kDurable;
    const auto comps = Components(key);
    const std::string leaf(comps.back());
    // A unique temporary name beside the target (same filesystem). A
    // concurrent Delete may prune a directory between its creation and our
    // open: retry both (once the temporary file exists, its directory is
    // non-empty and stays).
    const std::string tmp = ".tmp." + UniqueSuffix();
    DirChain chain;
    bool created = false;
    UniqueFd file;
    Status st;
    for (int attempt = 0; !file.valid() && attempt < 64; ++attempt) {
      st = OpenDirs(key, comps, comps.size() - 1, /*create=*/true,
                    "cannot write", &chain, &created);
      if (st.IsNotFound()) continue;
      RESHARD_RETURN_NOT_OK(st);
      const int dir = chain.Last(root_fd_.get());
      if (KindAt(dir, leaf) == Kind::kDirectory) {
        return Status::InvalidArgument("record key " + std::string(key) +
                                       " names a directory of records");
      }
      file = UniqueFd(
          ::openat(dir, tmp.c_str(),
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (!file.valid() && errno != ENOENT) break;
    }
    const int open_errno = errno;
    const std::string tmp_path = PathOf(ParentOf(key)) + "/" + tmp;
    if (!file.valid()) {
      errno = open_errno;
      return st.ok() ? Errno("cannot create", tmp_path) : st;
    }
    const int dir = chain.Last(root_fd_.get());
    if (created && durable) {
      // Make the new directories themselves durable: sync every directory
      // above the key's own (that one is synced after the link below).
      for (size_t i = 0; i < chain.dirs.size(); ++i) {
        const int fd = i == 0 ? root_fd_.get() : chain.dirs[i - 1].get();
        if (::fsync(fd) != 0) {
          st = Errno("cannot sync directory",
                     i == 0 ? root_ : PathOf(Prefix(key, comps, i - 1)));
          file.Reset();
          ::unlinkat(dir, tmp.c_str(), 0);
          return st;
        }
      }
    }
    for (const ConstBuffer& part : parts) {
      if (!st.ok()) break;
      st = WriteAll(
          file.get(),
          std::string_view(static_cast<const char*>(part.data), part.size),
          tmp_path);
    }
    if (st.ok() && durable && ::fsync(file.get()) != 0) {
      st = Errno("cannot sync", tmp_path);
    }
    file.Reset();
    if (st.ok() && ::linkat(dir, tmp.c_str(), dir, leaf.c_str(), 0) != 0) {
      if (errno != EEXIST) {
        st = Errno("cannot publish", PathOf(key));
      } else if (KindAt(dir, leaf) == Kind::kLink) {
        st = LinkError("cannot write", key, std::string(key));
      } else {
        st = Status::AlreadyExists("record exists: " + std::string(key));
      }
    }
    ::unlinkat(dir, tmp.c_str(), 0);
    RESHARD_RETURN_NOT_OK(st);
    if (durable && ::fsync(dir) != 0) {
      return Errno("cannot sync directory", PathOf(ParentOf(key)));
    }
    return Status::OK();
  }

  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override {
    uint64_t removed = 0;
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    RESHARD_RETURN_NOT_OK(Walk(
        "", /*hidden=*/true,
        [&](int dir, const std::string& name, const std::string&, Kind kind) {
          if (kind != Kind::kRegular || !name.starts_with(".tmp.")) return;
          struct stat sb;
          if (::fstatat(dir, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
              !S_ISREG(sb.st_mode) ||
              now - sb.st_mtim.tv_sec < older_than.count()) {
            return;
          }
          if (::unlinkat(dir, name.c_str(), 0) == 0) ++removed;
        }));
    return removed;
  }

  // One filesystem-wide flush: data, inodes and directory entries of
  // everything written so far.
  Status Sync() override {
    if (::syncfs(root_fd_.get()) != 0) {
      return Errno("cannot sync filesystem of", root_);
    }
    return Status::OK();
  }

  void set_max_record_bytes(uint64_t n) { max_record_bytes_ = n; }

  // Reads at most max_record_bytes_: a larger record (by its size, or by
  // growing while read) is DataLoss naming the key, before it sizes an
  // allocation.
  Result<std::string> Get(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    uint64_t size = 0;
    RESHARD_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegular(key, "record", &size));
    auto text = internal::ReadFdBounded(fd.get(), max_record_bytes_,
                                        "record " + std::string(key));
    if (text.status().IsInvalidArgument()) {
      return Status::DataLoss(text.status().message() +
                              " (a corrupt record or manifest)");
    }
    return text;
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::string_view whole = prefix;
    if (whole.ends_with('/')) whole.remove_suffix(1);
    if (!whole.empty()) RESHARD_RETURN_NOT_OK(ValidateRecordKey(whole));
    // Walk the deepest directory the prefix names completely.
    const size_t slash = prefix.rfind('/');
    const std::string base(
        slash == std::string_view::npos ? "" : prefix.substr(0, slash));
    std::vector<std::string> keys;
    RESHARD_RETURN_NOT_OK(Walk(
        base, /*hidden=*/false,
        [&](int, const std::string&, const std::string& key, Kind kind) {
          if (kind == Kind::kRegular || kind == Kind::kLink) {
            if (key.starts_with(prefix)) keys.push_back(key);
          }
        },
        prefix));
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  // Opens every object once and checks every range against its size before
  // reading anything, then reads the ranges in order, each straight into
  // caller memory. One reader: on this machine's virtio disk, 4 threads
  // made cold reads slower (readahead is per stream).
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    struct Open {
      UniqueFd fd;
      uint64_t size;
    };
    std::unordered_map<std::string_view, Open> files;
    std::vector<int> fds;  // per range
    for (const ReadRange& r : ranges) {
      auto it = files.find(r.key);
      if (it == files.end()) {
        RESHARD_RETURN_NOT_OK(ValidateRecordKey(r.key));
        uint64_t size = 0;
        RESHARD_ASSIGN_OR_RETURN(UniqueFd fd,
                                 OpenRegular(r.key, "object", &size));
        // Loads read each object front to back: a larger readahead.
        ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
        it = files.emplace(r.key, Open{std::move(fd), size}).first;
      }
      if (r.offset + r.length > it->second.size ||
          r.offset + r.length < r.offset) {
        return Status::DataLoss("object " + r.key + " is short: range [" +
                                std::to_string(r.offset) + ", " +
                                std::to_string(r.offset + r.length) +
                                ") is past its end (" +
                                std::to_string(it->second.size) + " bytes)");
      }
      fds.push_back(it->second.fd.get());
    }
    // Ranges that continue each other in one object are one preadv: a
    // strided load's rows land in their targets with one read per run.
    for (size_t k = 0; k < ranges.size();) {
      std::vector<internal::ReadBuffer> buffers = {
          {ranges[k].dest, ranges[k].length}};
      size_t j = k + 1;
      for (; j < ranges.size() && RangeContinues(ranges[j - 1], ranges[j]);
           ++j) {
        buffers.push_back({ranges[j].dest, ranges[j].length});
      }
      RESHARD_RETURN_NOT_OK(internal::PreadvAll(
          fds[k], buffers, ranges[k].offset, PathOf(ranges[k].key)));
      k = j;
    }
    return Status::OK();
  }

  Result<uint64_t> ObjectSize(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    uint64_t size = 0;
    RESHARD_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegular(key, "object", &size));
    return size;
  }

  // Removes the entry at `key` if it is a file or a symbolic link (the link
  // itself, never what it points to), then prunes the directories it left
  // empty. A directory of keys at `key` is no object: nothing is removed.
  Status Delete(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    const auto comps = Components(key);
    const std::string leaf(comps.back());
    DirChain chain;
    Status st = OpenDirs(key, comps, comps.size() - 1, /*create=*/false,
                         "cannot delete", &chain, nullptr);
    if (st.IsNotFound()) return Status::OK();
    RESHARD_RETURN_NOT_OK(st);
    const int dir = chain.Last(root_fd_.get());
    const Kind kind = KindAt(dir, leaf);
    if (kind == Kind::kError) return Errno("cannot stat", PathOf(key));
    if (kind == Kind::kMissing || kind == Kind::kDirectory) {
      return Status::OK();
    }
    if (::unlinkat(dir, leaf.c_str(), 0) != 0 && errno != ENOENT) {
      return Errno("cannot delete", PathOf(key));
    }
    // Prune directories left empty (a Put racing with this retries);
    // unlinkat(AT_REMOVEDIR) removes only an empty directory, never a link.
    for (size_t i = chain.dirs.size(); i-- > 0;) {
      const int parent = i == 0 ? root_fd_.get() : chain.dirs[i - 1].get();
      if (::unlinkat(parent, std::string(comps[i]).c_str(), AT_REMOVEDIR) !=
          0) {
        break;
      }
    }
    return Status::OK();
  }

 private:
  // `key` up to and including its component `i`.
  static std::string Prefix(std::string_view key,
                            const std::vector<std::string_view>& comps,
                            size_t i) {
    return std::string(key.substr(
        0,
        static_cast<size_t>(comps[i].data() + comps[i].size() - key.data())));
  }

  static std::string ParentOf(std::string_view key) {
    const size_t slash = key.rfind('/');
    return slash == std::string_view::npos ? ""
                                           : std::string(key.substr(0, slash));
  }

  static Status LinkError(const std::string& verb, std::string_view key,
                          const std::string& link) {
    return Status::DataLoss(verb + " " + std::string(key) + ": " + link +
                            " is a symbolic link (a store never follows "
                            "links)");
  }

  // Opens the first `n` components of `key` as directories into `chain`,
  // never following a link. NotFound when one is missing or is not a
  // directory; with `create`, missing ones are created (setting *created)
  // and NotFound means one vanished under a concurrent Delete (retry).
  // DataLoss naming the link when one is a symbolic link.
  Status OpenDirs(std::string_view key,
                  const std::vector<std::string_view>& comps, size_t n,
                  bool create, const std::string& verb, DirChain* chain,
                  bool* created) const {
    chain->dirs.clear();
    for (size_t i = 0; i < n; ++i) {
      const int at = chain->Last(root_fd_.get());
      const std::string name(comps[i]);
      constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      int fd = ::openat(at, name.c_str(), kFlags);
      if (fd < 0 && errno == ENOENT && create) {
        if (::mkdirat(at, name.c_str(), 0755) == 0) {
          *created = true;
        } else if (errno == ENOENT) {
          // The directory holding it was pruned under us: retry.
          return Status::NotFound("no key " + std::string(key));
        } else if (errno != EEXIST) {
          return Errno("cannot create directory",
                       PathOf(Prefix(key, comps, i)));
        }
        fd = ::openat(at, name.c_str(), kFlags);
      }
      if (fd < 0) {
        const int err = errno;
        if (err == ENOENT)
          return Status::NotFound("no key " + std::string(key));
        if (err == ENOTDIR || err == ELOOP) {
          const Kind kind = KindAt(at, name);
          if (kind == Kind::kLink) {
            return LinkError(verb, key, Prefix(key, comps, i));
          }
          if (kind == Kind::kMissing) {
            return Status::NotFound("no key " + std::string(key));
          }
          if (create) {
            errno = ENOTDIR;
            return Errno("cannot create directory",
                         PathOf(Prefix(key, comps, i)));
          }
          return Status::NotFound("no key " + std::string(key));
        }
        errno = err;
        return Errno("cannot open directory", PathOf(Prefix(key, comps, i)));
      }
      chain->dirs.emplace_back(fd);
    }
    return Status::OK();
  }

  // Opens the regular file at `key` for reading and tells its size.
  // NotFound ("no <what> KEY") when absent or not a regular file (a
  // directory of keys, a device); DataLoss when a link is on the way.
  Result<UniqueFd> OpenRegular(std::string_view key, const char* what,
                               uint64_t* size) const {
    const auto comps = Components(key);
    DirChain chain;
    const std::string verb = std::string("cannot read ") + what;
    Status st = OpenDirs(key, comps, comps.size() - 1, /*create=*/false, verb,
                         &chain, nullptr);
    const auto absent = [&] {
      return Status::NotFound("no " + std::string(what) + " " +
                              std::string(key));
    };
    if (st.IsNotFound()) return absent();
    RESHARD_RETURN_NOT_OK(st);
    const int dir = chain.Last(root_fd_.get());
    const std::string leaf(comps.back());
    // O_NONBLOCK: opening a FIFO planted at the key must not hang.
    UniqueFd fd(::openat(dir, leaf.c_str(),
                         O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ELOOP) return LinkError(verb, key, std::string(key));
      if (errno == ENOENT || errno == ENOTDIR) return absent();
      return Errno("cannot open", PathOf(key));
    }
    struct stat sb;
    if (::fstat(fd.get(), &sb) != 0) return Errno("cannot stat", PathOf(key));
    if (!S_ISREG(sb.st_mode)) return absent();
    *size = static_cast<uint64_t>(sb.st_size);
    return fd;
  }

  // Calls visit(dir fd, name, key, kind) for every entry below the
  // directory `base` (a key or "" for the root), descending into
  // directories but never into a symbolic link, skipping names starting
  // with '.' unless `hidden`. With `prefix`, only directories whose keys
  // can hold keys starting with it are entered. Directories that vanish
  // under a concurrent Delete are skipped, not errors; a link on the way to
  // `base` is DataLoss; a missing `base` visits nothing.
  template <typename Visit>
  Status Walk(const std::string& base, bool hidden, Visit visit,
              std::string_view prefix = {}) const {
    // Subdirectories wait as (open parent, name), opened when their turn
    // comes: the descriptors held open are those of the current path's
    // ancestors, however wide the tree.
    struct Pending {
      std::shared_ptr<const UniqueFd> parent;
      std::string name;
      std::string key;
    };
    std::shared_ptr<const UniqueFd> start;
    if (base.empty()) {
      start = std::make_shared<const UniqueFd>(
          ::openat(root_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!start->valid()) return Errno("cannot open", root_);
    } else {
      const auto comps = Components(base);
      DirChain chain;
      Status st = OpenDirs(base, comps, comps.size(), /*create=*/false,
                           "cannot list", &chain, nullptr);
      if (st.IsNotFound()) return Status::OK();
      RESHARD_RETURN_NOT_OK(st);
      start = std::make_shared<const UniqueFd>(std::move(chain.dirs.back()));
    }
    std::vector<Pending> todo;
    std::shared_ptr<const UniqueFd> dir = std::move(start);
    std::string dir_key = base;
    while (true) {
      RESHARD_RETURN_NOT_OK(
          ListDirectory(dir, dir_key, hidden, prefix, visit, &todo));
      std::shared_ptr<const UniqueFd> next;
      while (next == nullptr && !todo.empty()) {
        Pending p = std::move(todo.back());
        todo.pop_back();
        UniqueFd sub(::openat(p.parent->get(), p.name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) {
          // Pruned meanwhile, or replaced by something that is no
          // directory: report what is there now.
          const Kind now = KindAt(p.parent->get(), p.name);
          if (now != Kind::kDirectory && now != Kind::kMissing &&
              now != Kind::kError) {
            visit(p.parent->get(), p.name, p.key, now);
          }
          continue;
        }
        next = std::make_shared<const UniqueFd>(std::move(sub));
        dir_key = std::move(p.key);
      }
      if (next == nullptr) break;
      dir = std::move(next);
    }
    return Status::OK();
  }

  // One directory of Walk: visits its entries and queues its
  // subdirectories.
  template <typename Visit, typename Pending>
  Status ListDirectory(const std::shared_ptr<const UniqueFd>& dir,
                       const std::string& dir_key, bool hidden,
                       std::string_view prefix, Visit& visit,
                       std::vector<Pending>* todo) const {
    // fdopendir takes the descriptor it is given, and a duplicate would
    // share its read position with every other user of `dir` (the root's
    // is shared by concurrent walks): a fresh open of ".".
    const int own =
        ::openat(dir->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* stream = own < 0 ? nullptr : ::fdopendir(own);
    if (stream == nullptr) {
      if (own >= 0) ::close(own);
      return Errno("cannot list", PathOf(dir_key));
    }
    while (true) {
      errno = 0;
      const dirent* e = ::readdir(stream);
      if (e == nullptr) break;
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (!hidden && name.starts_with(".")) continue;
      std::string key = dir_key.empty() ? name : dir_key + "/" + name;
      Kind kind = Kind::kOther;
      switch (e->d_type) {
        case DT_REG:
          kind = Kind::kRegular;
          break;
        case DT_DIR:
          kind = Kind::kDirectory;
          break;
        case DT_LNK:
          kind = Kind::kLink;
          break;
        case DT_UNKNOWN:
          kind = KindAt(dir->get(), name);
          break;
        default:
          break;
      }
      if (kind != Kind::kDirectory) {
        visit(dir->get(), name, key, kind);
        continue;
      }
      const std::string as_dir = key + "/";
      if (!prefix.empty() && !as_dir.starts_with(prefix) &&
          !prefix.starts_with(as_dir)) {
        continue;
      }
      todo->push_back({dir, name, std::move(key)});
    }
    const int err = errno;
    ::closedir(stream);
    if (err != 0 && err != ENOENT) {
      errno = err;
      return Errno("cannot list", PathOf(dir_key));
    }
    return Status::OK();
  }

  std::string PathOf(std::string_view key) const {
    return key.empty() ? root_ : root_ + "/" + std::string(key);
  }

  std::string root_;
  std::string uri_;
  // The root directory, resolved once at open; every path below it is
  // reached from this descriptor.
  UniqueFd root_fd_;
  Durability record_durability_ = Durability::kDurable;  // of Put
  uint64_t max_record_bytes_ = kMaxStoreRecordBytes;     // of Get
};

Result<std::unique_ptr<FsStore>> OpenFsStore(const std::string& root,
                                             bool create_if_missing) {
  if (root.empty()) {
    return Status::InvalidArgument("record store directory is empty");
  }
  std::error_code ec;
  if (!create_if_missing) {
    struct stat sb;
    if (::stat(root.c_str(), &sb) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        return Status::NotFound("store directory " + root + " does not exist");
      }
      return Errno("cannot open store directory", root);
    }
    if (!S_ISDIR(sb.st_mode)) {
      return Status::InvalidArgument("store directory " + root +
                                     " is not a directory");
    }
  }
  if (create_if_missing) fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    return Status::IOError("cannot create record store directory " + root +
                           (ec ? ": " + ec.message() : ""));
  }
  std::string normal = fs::absolute(root).lexically_normal().string();
  while (normal.size() > 1 && normal.ends_with('/')) normal.pop_back();
  // The one place a link may be followed: the root the user named.
  UniqueFd fd(::open(normal.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Errno("cannot open record store directory", normal);
  return std::make_unique<FsStore>(normal, std::move(fd));
}

}  // namespace

Result<std::unique_ptr<RecordStore>> OpenDirectoryRecordStore(
    const std::string& root, const DirectoryRecordStoreOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(auto store,
                           OpenFsStore(root, /*create_if_missing=*/true));
  store->set_record_durability(options.durability);
  store->set_max_record_bytes(options.max_record_bytes);
  return std::unique_ptr<RecordStore>(std::move(store));
}

Result<std::unique_ptr<ObjectStore>> OpenFsObjectStore(
    std::string_view root, const FsObjectStoreOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      auto store, OpenFsStore(std::string(root), options.create_if_missing));
  store->set_max_record_bytes(options.max_record_bytes);
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace reshard
