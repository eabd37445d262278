// Read-only mappings of whole regular files: their bytes without copying
// them into fresh memory (no zero-filled pages, no copy out of the page
// cache), for large inputs decoded once.

#ifndef RESHARD_UTIL_MAPPED_FILE_H_
#define RESHARD_UTIL_MAPPED_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace reshard::internal {

// A move-only owner of a private read-only mapping of one file.
//
// Contract: the file must not shrink while it is mapped. A page past the
// file's new end faults with SIGBUS when read; a process that maps input
// files installs ExitOnBusError (the CLI does) to fail with a message
// instead. Pages given back with madvise(MADV_DONTNEED) read the file
// again, so a decoder may drop what it has read and still fall back to
// reading the whole text.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Maps `path` if it is a regular file of at least `min_bytes` and at
  // most `max_bytes` bytes. Anything else (a missing, smaller, larger or
  // unreadable file, a FIFO, a device, a mapping refused) gives an
  // unmapped MappedFile: the caller reads the path instead, which reports
  // any error. A FIFO is never opened here (its writer would be released
  // and then see its reader gone).
  // `copy_on_write`: the mapping is writable too, each written page a
  // private copy (the file never changes); otherwise a write faults.
  static MappedFile Open(const std::string& path, uint64_t min_bytes,
                         uint64_t max_bytes, bool copy_on_write = false);
  // Maps the first `size` bytes of the open regular file `fd` (still the
  // caller's); unmapped when `size` is 0 or the mapping is refused.
  static MappedFile Map(int fd, uint64_t size, bool copy_on_write = false);

  bool mapped() const { return data_ != nullptr; }
  std::string_view view() const { return {data_, size_}; }
  // The mapping's first byte, writable only if mapped copy-on-write.
  uint8_t* data() const {
    return reinterpret_cast<uint8_t*>(const_cast<char*>(data_));
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Installs a SIGBUS handler that writes `message` (its first 500 bytes)
// and a newline to standard error and exits with status 1: the clear
// failure of a process whose mapped input was truncated under it.
void ExitOnBusError(std::string_view message);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_MAPPED_FILE_H_
