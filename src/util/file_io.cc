#include "util/file_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "util/printable.h"

namespace reshard::internal {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileDescriptor::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status ErrnoStatus(std::string_view what, std::string_view path) {
  return Status::IOError(std::string(what) + " " + Printable(path) + ": " +
                         std::strerror(errno));
}

// One read moves at most 1 GiB (Linux caps a call near 2 GiB anyway).
constexpr uint64_t kMaxCall = uint64_t{1} << 30;

Status PreadvAll(int fd, const std::vector<ReadBuffer>& buffers,
                 uint64_t offset, std::string_view path) {
  std::vector<iovec> iov;
  iov.reserve(buffers.size());
  uint64_t total = 0;
  for (const ReadBuffer& b : buffers) {
    iov.push_back({b.data, b.size});
    total += b.size;
  }
  uint64_t done = 0;
  size_t first = 0;
  while (done < total) {
    const int count =
        static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t got = ::preadv(fd, iov.data() + first, count,
                                 static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot read", path);
    }
    if (got == 0) {
      return Status::DataLoss(Printable(path) + " is short: bytes [" +
                              std::to_string(offset + done) + ", " +
                              std::to_string(offset + total) +
                              ") are past its end (was it truncated?)");
    }
    done += static_cast<uint64_t>(got);
    // Drop the buffers filled; resume inside a partly filled one.
    uint64_t left = static_cast<uint64_t>(got);
    while (left > 0 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return Status::OK();
}

Status PreadAll(int fd, void* dest, uint64_t n, uint64_t offset,
                std::string_view path) {
  return PreadvAll(fd, {{dest, n}}, offset, path);
}

Status PwriteAll(int fd, const void* src, uint64_t n, uint64_t offset,
                 std::string_view path) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (uint64_t done = 0; done < n;) {
    const ssize_t put =
        ::pwrite(fd, p + done, std::min(n - done, kMaxWriteCall),
                 static_cast<off_t>(offset + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path);
    }
    done += static_cast<uint64_t>(put);
  }
  return Status::OK();
}

Result<std::string> ReadFdBounded(int fd, uint64_t max_bytes,
                                  std::string_view name,
                                  std::string_view hint) {
  const auto too_large = [&] {
    return Status::InvalidArgument(
        Printable(name) + " is larger than " + std::to_string(max_bytes) +
        " bytes" + (hint.empty() ? "" : " (" + std::string(hint) + ")"));
  };
  // A regular file tells its size: refuse before allocating anything. The
  // size only sizes the first allocation; the reads below still stop at
  // the cap if the file grows.
  uint64_t expected = 0;
  struct stat sb;
  if (::fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
    const off_t at = ::lseek(fd, 0, SEEK_CUR);
    const uint64_t size = static_cast<uint64_t>(sb.st_size);
    expected = at > 0 && static_cast<uint64_t>(at) < size
                   ? size - static_cast<uint64_t>(at)
                   : (at > 0 ? 0 : size);
    if (expected > max_bytes) return too_large();
  }
  std::string out;
  try {
    // One byte more than the cap tells a source that is exactly at the cap
    // from one that is larger.
    const uint64_t limit = max_bytes + (max_bytes < UINT64_MAX ? 1 : 0);
    uint64_t capacity = std::min<uint64_t>(
        std::max<uint64_t>(expected + 1, uint64_t{1} << 16), limit);
    out.resize(capacity);
    uint64_t filled = 0;
    while (true) {
      if (filled == capacity) {
        if (capacity >= limit) return too_large();
        capacity = std::min(limit, capacity * 2);
        out.resize(capacity);
      }
      const ssize_t n = ::read(fd, out.data() + filled,
                               std::min(capacity - filled, kMaxCall));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("cannot read", name);
      }
      if (n == 0) break;
      filled += static_cast<uint64_t>(n);
    }
    if (filled > max_bytes) return too_large();
    out.resize(filled);
    // Shrinking copies every byte into fresh memory: worth it only for a
    // stream that left much of a doubled buffer unused, not for the one
    // spare byte of a regular file read at its size.
    if (out.capacity() - filled > filled / 4) out.shrink_to_fit();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "out of memory reading " + Printable(name) + " (" +
        std::to_string(out.size()) + " bytes allocated)");
  }
  return out;
}

std::string_view FileKindName(unsigned st_mode) {
  switch (st_mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "not a file";
}

Result<FileDescriptor> OpenRegularFile(const std::string& path,
                                       uint64_t* size) {
  return OpenRegularFileAt(AT_FDCWD, path, path, size);
}

Result<FileDescriptor> OpenRegularFileAt(int dir, const std::string& name,
                                         const std::string& shown,
                                         uint64_t* size) {
  const auto not_regular = [&shown](mode_t mode) {
    return Status::InvalidArgument(Printable(shown) +
                                   " is not a regular file (" +
                                   std::string(FileKindName(mode)) + ")");
  };
  FileDescriptor fd(::openat(dir, name.c_str(),
                             O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      return Status::NotFound("cannot read " + Printable(shown) + ": " +
                              std::strerror(errno));
    }
    // A socket cannot be opened at all (ENXIO).
    const int open_errno = errno;
    struct stat st;
    if (open_errno == ENXIO && ::fstatat(dir, name.c_str(), &st, 0) == 0 &&
        !S_ISREG(st.st_mode)) {
      return not_regular(st.st_mode);
    }
    errno = open_errno;
    return ErrnoStatus("cannot read", shown);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("cannot stat", shown);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode);
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

Result<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes,
                                    std::string_view hint) {
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor fd, OpenRegularFile(path));
  return ReadFdBounded(fd.get(), max_bytes, path, hint);
}

namespace {

// Writes all of `content` to `fd` (sequentially, retrying short writes).
Status WriteAll(int fd, std::string_view content, const std::string& where) {
  while (!content.empty()) {
    const ssize_t n = ::write(
        fd, content.data(), std::min<uint64_t>(content.size(), kMaxWriteCall));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(where + ": cannot write: " + std::strerror(errno));
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

std::string TemporaryName(const std::string& path) {
  static std::mt19937_64 random{std::random_device{}()};
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp-%d-%016llx", ::getpid(),
                static_cast<unsigned long long>(random()));
  return path + suffix;
}

// Writes a new file beside `path` and renames it over `path`, which is a
// regular file (`replaced` is its stat) or, when `replaced` is null, did
// not exist (then never replaced: a file that appears meanwhile stays).
Status ReplaceRegular(const std::string& where, const std::string& path,
                      std::string_view content, const struct stat* replaced) {
  const std::string tmp = TemporaryName(path);
  FileDescriptor fd(::open(
      tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (!fd.valid()) {
    return Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  Status st = WriteAll(fd.get(), content, where);
  if (st.ok() && replaced != nullptr &&
      ::fchmod(fd.get(), replaced->st_mode & 07777) != 0) {
    st = Status::IOError(where + ": cannot set mode: " + std::strerror(errno));
  }
  if (st.ok() && ::fsync(fd.get()) != 0) {
    st = Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  const int closed = ::close(fd.get());
  fd = FileDescriptor();
  if (st.ok() && closed != 0) {
    st = Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  if (st.ok()) {
    int renamed = -1;
    if (replaced == nullptr) {
      renamed = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(),
                            RENAME_NOREPLACE);
      // A filesystem without RENAME_NOREPLACE: a plain rename.
      if (renamed != 0 && (errno == EINVAL || errno == ENOSYS)) {
        renamed = ::rename(tmp.c_str(), path.c_str());
      }
    } else {
      // Still the regular file looked at (not swapped for something else).
      struct stat now;
      if (::lstat(path.c_str(), &now) != 0 || !S_ISREG(now.st_mode)) {
        errno = EEXIST;
      } else {
        renamed = ::rename(tmp.c_str(), path.c_str());
      }
    }
    if (renamed != 0) {
      st = errno == EEXIST
               ? Status::IOError(where +
                                 ": changed while being written; not replaced")
               : Status::IOError(where +
                                 ": cannot write: " + std::strerror(errno));
    }
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

// Writes `content` straight into the character device or FIFO at `path`.
Status WriteDirect(const std::string& where, const std::string& path,
                   std::string_view content) {
  // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
  FileDescriptor fd(
      ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENXIO) {
      return Status::IOError(where + ": cannot write: a FIFO with no reader");
    }
    return Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  struct stat sb;
  if (::fstat(fd.get(), &sb) != 0 ||
      !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
    return Status::IOError(where +
                           ": changed while being written; not written");
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  RESHARD_RETURN_NOT_OK(WriteAll(fd.get(), content, where));
  if (::close(fd.get()) != 0) {
    fd = FileDescriptor();
    return Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  fd = FileDescriptor();
  return Status::OK();
}

}  // namespace

Result<OutputTarget> ResolveOutputFile(std::string_view what,
                                       const std::string& path) {
  OutputTarget out;
  out.where = std::string(what) + " " + Printable(path);
  const std::string& where = out.where;
  if (path.empty()) return Status::InvalidArgument(where + ": empty path");
  struct stat sb;
  if (::lstat(path.c_str(), &sb) != 0) {
    if (errno != ENOENT) {
      return Status::IOError(where + ": cannot write: " + std::strerror(errno));
    }
    out.kind = OutputTarget::Kind::kNewFile;
    out.file = path;
    return out;
  }
  std::string target = path;
  if (S_ISLNK(sb.st_mode)) {
    // Written through: what the link resolves to decides.
    if (::stat(path.c_str(), &sb) != 0) {
      return Status::IOError(
          where +
          ": is a symbolic link to nothing usable: " + std::strerror(errno));
    }
    if (S_ISREG(sb.st_mode)) {
      char* real = ::realpath(path.c_str(), nullptr);
      if (real == nullptr) {
        return Status::IOError(
            where + ": cannot resolve symbolic link: " + std::strerror(errno));
      }
      target = real;
      std::free(real);
      if (::lstat(target.c_str(), &sb) != 0) {
        return Status::IOError(where +
                               ": cannot write: " + std::strerror(errno));
      }
    }
  }
  if (S_ISREG(sb.st_mode)) {
    out.kind = OutputTarget::Kind::kReplaceFile;
    out.file = target;
    out.replaced = sb;
    return out;
  }
  if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
    out.kind = OutputTarget::Kind::kDirect;
    return out;
  }
  return Status::InvalidArgument(
      where + ": is " + std::string(FileKindName(sb.st_mode)) +
      "; an output must be a regular file, a character device or a FIFO");
}

Status WriteOutputFile(std::string_view what, const std::string& path,
                       std::string_view content) {
  RESHARD_ASSIGN_OR_RETURN(OutputTarget out, ResolveOutputFile(what, path));
  switch (out.kind) {
    case OutputTarget::Kind::kNewFile:
      return ReplaceRegular(out.where, out.file, content, nullptr);
    case OutputTarget::Kind::kReplaceFile:
      return ReplaceRegular(out.where, out.file, content, &out.replaced);
    case OutputTarget::Kind::kDirect:
      break;
  }
  return WriteDirect(out.where, path, content);
}

}  // namespace reshard::internal
