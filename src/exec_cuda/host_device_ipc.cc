// HostDeviceApi's CUDA IPC (host_device_api.h): exportable allocations are
// memfd mappings shared between processes; a handle names one by the
// exporting process's id, its descriptor there and a serial number that
// is also the memfd's name, so an importer reopens exactly that file
// through /proc/<pid>/fd/<fd> (which the same user may read) and a handle
// whose allocation was freed, or whose process exited, finds another name
// or none and is refused.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "exec_cuda/host_device_api.h"

namespace reshard::cuda {

namespace {

constexpr char kMagic[8] = {'r', 's', 'h', 'd', 'i', 'p', 'c', '1'};

// The handle's 64 bytes.
struct HandleBody {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t serial;
  uint64_t bytes;
  int32_t device;
  uint8_t unused[28];
};
static_assert(sizeof(HandleBody) == sizeof(IpcMemHandle::bytes));

std::atomic<uint64_t> next_serial{1};

using host_emulation::Refuse;

std::string MemfdName(int32_t pid, uint64_t serial) {
  return "reshard-emulated-" + std::to_string(pid) + "-" +
         std::to_string(serial);
}

size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// The memfd a handle names, opened here, or the refusal.
Result<int> OpenExported(const HandleBody& h) {
  const std::string link =
      "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char target[256] = {};
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  const std::string expected =
      "/memfd:" + MemfdName(h.pid, h.serial) + " (deleted)";
  if (n < 0 || std::string(target, static_cast<size_t>(n)) != expected) {
    return Refuse("cudaErrorInvalidResourceHandle",
                  "IpcOpenMemHandle: the allocation of process " +
                      std::to_string(h.pid) + " that the handle names (" +
                      MemfdName(h.pid, h.serial) +
                      ") is no longer exported (freed, or its process "
                      "exited)");
  }
  const int fd = ::open(link.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < h.bytes) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return Refuse("cudaErrorMapBufferObjectFailed",
                  "IpcOpenMemHandle: cannot open " + link + ": " + why);
  }
  return fd;
}

}  // namespace

namespace host_emulation {
Status FreeOfImport() {
  return Refuse("cudaErrorInvalidValue",
                "Free: IpcOpenMemHandle mapped the pointer (IpcCloseMemHandle "
                "closes it)");
}
}  // namespace host_emulation

void* HostDeviceApi::AllocateMemory(size_t bytes) {
  if (!options_.ipc_shareable) {
    return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  }
  const uint64_t serial = next_serial.fetch_add(1);
  const int fd =
      ::memfd_create(MemfdName(::getpid(), serial).c_str(), MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  const size_t length = PageRounded(bytes);
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(length)) == 0) {
    p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  shared_[reinterpret_cast<uintptr_t>(p)] = {fd, serial};
  return p;
}

void HostDeviceApi::ReleaseMemory(void* ptr, size_t bytes) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(ptr);
  if (imports_.erase(base) != 0) {
    ::munmap(ptr, PageRounded(bytes));
    return;
  }
  auto it = shared_.find(base);
  if (it == shared_.end()) {
    std::free(ptr);
    return;
  }
  ::munmap(ptr, PageRounded(bytes));
  ::close(it->second.fd);
  shared_.erase(it);
}

Result<AllocationRange> HostDeviceApi::AllocationOf(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  const Location at = Locate(ptr);
  if (at.device < 0) {
    return Refuse("cudaErrorInvalidValue",
                  "AllocationOf: the pointer lies in no device allocation of "
                  "this HostDeviceApi");
  }
  return AllocationRange{reinterpret_cast<void*>(at.base), at.bytes};
}

Result<IpcMemHandle> HostDeviceApi::IpcGetMemHandle(void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  const uintptr_t address = reinterpret_cast<uintptr_t>(base);
  auto it = allocations_.find(address);
  if (it == allocations_.end() || imports_.count(address) != 0) {
    const Location at = Locate(base);
    std::string why = at.device < 0
                          ? "the pointer is not a device allocation of this "
                            "HostDeviceApi"
                          : "the pointer lies " +
                                std::to_string(address - at.base) +
                                " bytes into an allocation, not at its base";
    if (imports_.count(address) != 0) {
      why =
          "the pointer is memory IpcOpenMemHandle mapped, not an "
          "allocation of this process";
    }
    return Log("IpcGetMemHandle",
               Refuse("cudaErrorInvalidValue", "IpcGetMemHandle: " + why));
  }
  const std::string line =
      "IpcGetMemHandle device=" + std::to_string(it->second.device) +
      " bytes=" + std::to_string(it->second.bytes);
  auto shared = shared_.find(address);
  if (shared == shared_.end()) {
    return Log(line, Status::InvalidArgument(
                         "cudaErrorNotSupported: IpcGetMemHandle: this "
                         "HostDeviceApi was made without ipc_shareable (its "
                         "allocations are private memory)"));
  }
  HandleBody h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.pid = ::getpid();
  h.fd = shared->second.fd;
  h.serial = shared->second.serial;
  h.bytes = it->second.bytes;
  h.device = it->second.device;
  IpcMemHandle out;
  std::memcpy(out.bytes, &h, sizeof h);
  RESHARD_RETURN_NOT_OK(Log(line, Status::OK()));
  return out;
}

Result<void*> HostDeviceApi::IpcOpenMemHandle(int device,
                                              const IpcMemHandle& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  HandleBody h{};
  std::memcpy(&h, handle.bytes, sizeof h);
  const std::string line = "IpcOpenMemHandle device=" + std::to_string(device) +
                           " bytes=" + std::to_string(h.bytes);
  Status st = CheckDevice(device, "device");
  if (!st.ok()) return Log(line, st);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.bytes == 0) {
    return Log("IpcOpenMemHandle device=" + std::to_string(device),
               Refuse("cudaErrorInvalidValue",
                      "IpcOpenMemHandle: the handle is not one that "
                      "IpcGetMemHandle made"));
  }
  if (h.pid == ::getpid()) {
    return Log(line, Refuse("cudaErrorDeviceUninitialized",
                            "IpcOpenMemHandle: the handle was exported by "
                            "this process, which cannot open it"));
  }
  for (auto& [base, import] : imports_) {
    if (import.pid == h.pid && import.serial == h.serial) {
      ++import.refs;
      RESHARD_RETURN_NOT_OK(
          Log(line + " -> refs=" + std::to_string(import.refs), Status::OK()));
      return reinterpret_cast<void*>(base);
    }
  }
  Result<int> fd = OpenExported(h);
  if (!fd.ok()) return Log(line, fd.status());
  void* p = ::mmap(nullptr, PageRounded(h.bytes), PROT_READ | PROT_WRITE,
                   MAP_SHARED, *fd, 0);
  const std::string why = std::strerror(errno);
  ::close(*fd);
  if (p == MAP_FAILED) {
    return Log(line, Refuse("cudaErrorMapBufferObjectFailed",
                            "IpcOpenMemHandle: mmap: " + why));
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  allocations_[base] = {device, h.bytes};
  imports_[base] = {h.pid, h.serial, 1};
  RESHARD_RETURN_NOT_OK(Log(line + " -> refs=1", Status::OK()));
  return p;
}

Status HostDeviceApi::IpcCloseMemHandle(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  const uintptr_t base = reinterpret_cast<uintptr_t>(ptr);
  auto it = imports_.find(base);
  if (it == imports_.end()) {
    return Log("IpcCloseMemHandle",
               Refuse("cudaErrorInvalidValue",
                      "IpcCloseMemHandle: the pointer is not one that "
                      "IpcOpenMemHandle returned (or it was closed)"));
  }
  const size_t bytes = allocations_[base].bytes;
  const std::string line = "IpcCloseMemHandle bytes=" + std::to_string(bytes);
  if (--it->second.refs > 0) {
    return Log(line + " -> refs=" + std::to_string(it->second.refs),
               Status::OK());
  }
  // The work queued so far may still touch the mapping: it runs first.
  for (auto& [handle, stream] : streams_) RunStream(stream, stream.queued);
  allocations_.erase(base);
  ReleaseMemory(ptr, bytes);
  return Log(line + " -> refs=0", Status::OK());
}

}  // namespace reshard::cuda
