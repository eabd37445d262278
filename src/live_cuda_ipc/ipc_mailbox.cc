// IpcMailbox (ipc_mailbox.h): Unix datagram sockets in the abstract
// namespace.
#include "live_cuda_ipc/ipc_mailbox.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace reshard::internal {
namespace {

struct Header {
  uint32_t from;
  uint32_t unused;
  uint64_t tag;
  uint64_t total;   // the message's length
  uint64_t offset;  // of this chunk in it
};

std::atomic<uint64_t> next_mailbox{0};

// The abstract address `name` (a leading NUL, then the name).
socklen_t AddressOf(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof addr->sun_path - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

Result<std::unique_ptr<IpcMailbox>> IpcMailbox::Open() {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Status::IOError(std::string("cuda-ipc mailbox: socket: ") +
                           std::strerror(errno));
  }
  const std::string name = "reshard-cuda-ipc-" + std::to_string(::getpid()) +
                           "-" + std::to_string(next_mailbox.fetch_add(1));
  sockaddr_un addr;
  const socklen_t len = AddressOf(name, &addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::IOError("cuda-ipc mailbox: bind " + name + ": " + why);
  }
  return std::unique_ptr<IpcMailbox>(new IpcMailbox(fd, name));
}

IpcMailbox::~IpcMailbox() { ::close(fd_); }

Status IpcMailbox::Send(const std::string& to, uint32_t from, uint64_t tag,
                        const uint8_t* bytes, uint64_t length,
                        Clock::time_point deadline) {
  sockaddr_un addr;
  const socklen_t len = AddressOf(to, &addr);
  std::vector<uint8_t> datagram;
  uint64_t offset = 0;
  do {
    const uint64_t n = std::min(kMailboxChunk, length - offset);
    const Header h{from, 0, tag, length, offset};
    datagram.resize(sizeof h + n);
    std::memcpy(datagram.data(), &h, sizeof h);
    if (n > 0) std::memcpy(datagram.data() + sizeof h, bytes + offset, n);
    while (::sendto(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT,
                    reinterpret_cast<sockaddr*>(&addr), len) < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS &&
          errno != EINTR) {
        return Status::Unavailable("mailbox " + to + " is gone (" +
                                   std::strerror(errno) + ")");
      }
      if (Clock::now() >= deadline) {
        return Status::Unavailable("timed out: mailbox " + to + " is full");
      }
      Drain(std::chrono::milliseconds(1));  // what the peer sends us meanwhile
    }
    offset += n;
  } while (offset < length);
  return Status::OK();
}

void IpcMailbox::Drain(std::chrono::milliseconds wait) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return;
  std::vector<uint8_t> datagram(sizeof(Header) + kMailboxChunk);
  while (true) {
    const ssize_t got =
        ::recv(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT);
    if (got < 0) return;  // EAGAIN: nothing more waiting
    Header h;
    if (static_cast<size_t>(got) < sizeof h) continue;  // not one of ours
    std::memcpy(&h, datagram.data(), sizeof h);
    const uint64_t n = static_cast<uint64_t>(got) - sizeof h;
    if (h.offset > h.total || n > h.total - h.offset) continue;
    const auto key = std::make_pair(h.from, h.tag);
    Partial& part = partial_[key];
    if (h.offset == 0) part = Partial{std::vector<uint8_t>(h.total), 0};
    if (part.bytes.size() != h.total) continue;  // a chunk without its start
    if (n > 0)
      std::memcpy(part.bytes.data() + h.offset, datagram.data() + sizeof h, n);
    part.filled += n;
    if (part.filled == h.total) {
      complete_[key] = std::move(part.bytes);
      partial_.erase(key);
    }
  }
}

Result<std::vector<uint8_t>> IpcMailbox::Receive(
    uint32_t from, uint64_t tag, Clock::time_point deadline,
    const std::function<Status()>& poll_abort,
    std::chrono::milliseconds poll_interval) {
  const auto key = std::make_pair(from, tag);
  auto last_poll = Clock::now();
  while (true) {
    auto it = complete_.find(key);
    if (it != complete_.end()) {
      std::vector<uint8_t> out = std::move(it->second);
      complete_.erase(it);
      return out;
    }
    const auto now = Clock::now();
    if (now >= deadline) return Status::Unavailable("timed out");
    if (poll_abort && now - last_poll >= poll_interval) {
      last_poll = now;
      RESHARD_RETURN_NOT_OK(poll_abort());
    }
    Drain(std::chrono::milliseconds(2));
  }
}

void IpcMailbox::Drop(uint32_t from) {
  std::erase_if(partial_, [&](const auto& e) { return e.first.first == from; });
  std::erase_if(complete_,
                [&](const auto& e) { return e.first.first == from; });
}

}  // namespace reshard::internal
