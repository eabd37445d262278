// File descriptors and positional I/O: the filesystem store and the
// checkpoint reader and writer; whole-file reads bounded by a size cap, and
// output files written without replacing what they must not.

#ifndef RESHARD_UTIL_FILE_IO_H_
#define RESHARD_UTIL_FILE_IO_H_

#include <sys/stat.h>

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

// The most one write call moves. A larger buffered write makes the page
// cache take folios as large as the write (up to 2 MiB), which come from
// the high-order free blocks a virtual machine's host may have reclaimed:
// measured on a VM, writing 476 MB in calls of 1.5 MB on average took
// 0.11-0.60 s from run to run, in 256 KiB calls about 0.13 s every time.
// The calls cost nothing next to the copies (4,096 per GiB).
inline constexpr uint64_t kMaxWriteCall = uint64_t{256} << 10;

// Writes exactly `n` bytes at `offset` (retrying short writes and EINTR).
Status PwriteAll(int fd, const void* src, uint64_t n, uint64_t offset,
                 std::string_view path);

// Reads all of `fd` from its current position, at most `max_bytes`: a
// source holding more is InvalidArgument "<name> is larger than <max_bytes>
// bytes (<hint>)", found before anything is allocated when the size is
// known (a regular file's st_size) and otherwise by reading no more than
// max_bytes + 1 bytes (a FIFO, /dev/zero, a file growing meanwhile).
// `name` is printed escaped.
Result<std::string> ReadFdBounded(int fd, uint64_t max_bytes,
                                  std::string_view name,
                                  std::string_view hint = {});

// What a file of mode `st_mode` is, for errors: "a regular file", "a
// directory", "a FIFO", "a character device", "a block device", "a
// socket" or "a symbolic link".
std::string_view FileKindName(unsigned st_mode);

// Opens `path` read-only (following links) without ever blocking: the open
// is non-blocking, so a FIFO with no writer or a device that waits for a
// peer returns at once, and then whatever is not a regular file is
// InvalidArgument "<path> is not a regular file (a FIFO)". A missing file
// is NotFound "cannot read <path>: No such file or directory"; other open
// errors are IOError naming the path. The descriptor is blocking again;
// `size`, when given, receives the file's size as opened. Every input a
// path names is opened this way: a stray FIFO or device among them must
// never hang a command.
Result<FileDescriptor> OpenRegularFile(const std::string& path,
                                       uint64_t* size = nullptr);
// The same for `name` relative to the directory `dir` (AT_FDCWD: the
// working directory); errors name `shown`.
Result<FileDescriptor> OpenRegularFileAt(int dir, const std::string& name,
                                         const std::string& shown,
                                         uint64_t* size = nullptr);

// OpenRegularFile, then ReadFdBounded. (Standard input, a pipe, is read
// with ReadFdBounded on its descriptor.)
Result<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes,
                                    std::string_view hint = {});

// Writes `content` to the output file `path` without ever replacing
// anything but a regular file (docs/reliability.md, "Output files"):
//   - nothing there, or a regular file: the bytes go to a new file beside
//     it (same directory, created with mode 0666 less the umask, or the
//     replaced file's mode), are synced, and the new file is renamed over
//     the path; on any failure it is removed and the path is untouched;
//   - a symbolic link: written through, by these rules applied to the file
//     the link resolves to (the link itself stays); a link to nothing is
//     refused;
//   - a character device or a FIFO (/dev/null, /dev/stdout, a pipe): the
//     bytes are written to it directly (a FIFO without a reader is refused
//     rather than waited for);
//   - anything else (a directory, a block device, a socket) is refused.
// Errors are IOError or InvalidArgument "<what> <path>: <reason>", with
// `what` naming the flag or file ("--html", "output").
Status WriteOutputFile(std::string_view what, const std::string& path,
                       std::string_view content);

// How WriteOutputFile will write `path`, found without writing: its
// refusals (an empty path, a link to nothing, a directory, ...) are the
// same errors.
struct OutputTarget {
  enum class Kind {
    kNewFile,      // nothing there: a new regular file at `file`
    kReplaceFile,  // a regular file at `file` (a link resolved), replaced
    kDirect,       // a character device or a FIFO, written at the path
  };
  Kind kind = Kind::kNewFile;
  std::string where;          // "<what> <path>", the prefix of its errors
  std::string file;           // kNewFile, kReplaceFile: the regular file's path
  struct stat replaced = {};  // kReplaceFile: the file replaced
};
Result<OutputTarget> ResolveOutputFile(std::string_view what,
                                       const std::string& path);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_FILE_IO_H_
