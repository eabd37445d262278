#include "util/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "util/file_io.h"

namespace reshard::internal {

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

MappedFile MappedFile::Open(const std::string& path, uint64_t min_bytes,
                            uint64_t max_bytes, bool copy_on_write) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  // Non-blocking: the path may have become a FIFO since the stat.
  FileDescriptor fd(
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  // Checked again on what was opened: the path may have changed meanwhile.
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return {};
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < min_bytes || size > max_bytes) return {};
  return Map(fd.get(), size, copy_on_write);
}

MappedFile MappedFile::Map(int fd, uint64_t size, bool copy_on_write) {
  if (size == 0) return {};
  void* p = ::mmap(nullptr, size, PROT_READ | (copy_on_write ? PROT_WRITE : 0),
                   MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return {};
  MappedFile out;
  out.data_ = static_cast<const char*>(p);
  out.size_ = size;
  return out;
}

namespace {

// Written by ExitOnBusError before the handler can run, read only there.
char bus_error_message[512];
size_t bus_error_length = 0;

void OnBusError(int) {
  // Only async-signal-safe calls here.
  ssize_t ignored = ::write(STDERR_FILENO, bus_error_message, bus_error_length);
  (void)ignored;
  ::_exit(1);
}

}  // namespace

void ExitOnBusError(std::string_view message) {
  bus_error_length = std::min(message.size(), sizeof(bus_error_message) - 12);
  std::memcpy(bus_error_message, message.data(), bus_error_length);
  bus_error_message[bus_error_length++] = '\n';
  struct sigaction action = {};
  action.sa_handler = OnBusError;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace reshard::internal
