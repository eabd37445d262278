#include "util/file_io.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

// One write moves at most 1 GiB (Linux caps a call near 2 GiB anyway).
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
    const ssize_t put = ::pwrite(fd, p + done, std::min(n - done, kMaxCall),
                                 static_cast<off_t>(offset + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path);
    }
    done += static_cast<uint64_t>(put);
  }
  return Status::OK();
}

}  // namespace reshard::internal
