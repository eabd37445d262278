// File descriptors and positional I/O: the filesystem store and the
// checkpoint reader and writer.

#ifndef RESHARD_UTIL_FILE_IO_H_
#define RESHARD_UTIL_FILE_IO_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace reshard::internal {

// A move-only owner of one open file descriptor.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&& o) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// IOError "<what> <path>: <strerror(errno)>".
Status ErrnoStatus(std::string_view what, std::string_view path);

// Reads exactly `n` bytes at `offset` (retrying short reads and EINTR); a
// file that ends first is DataLoss naming `path` and the range.
Status PreadAll(int fd, void* dest, uint64_t n, uint64_t offset,
                std::string_view path);

// Reads exactly the buffers' total size at `offset` into `buffers` in
// order (one preadv per up to IOV_MAX buffers, short reads resumed).
struct ReadBuffer {
  void* data;
  uint64_t size;
};
Status PreadvAll(int fd, const std::vector<ReadBuffer>& buffers,
                 uint64_t offset, std::string_view path);

// Writes exactly `n` bytes at `offset` (retrying short writes and EINTR).
Status PwriteAll(int fd, const void* src, uint64_t n, uint64_t offset,
                 std::string_view path);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_FILE_IO_H_
