// Internal to live_cuda_ipc: small messages between processes of one host,
// for what a "cuda-ipc" session sends besides the data (its verification
// hashes, ExchangeOp::buffer). A mailbox is a Unix datagram socket in the
// abstract namespace, "reshard-cuda-ipc-<pid>-<n>"; a message travels as
// datagrams of at most kMailboxChunk bytes, each headed by the sender's
// rank, the message's tag, its length and the chunk's offset. Datagrams of
// a Unix socket arrive whole and in order, and a send that finds the
// peer's queue full receives this mailbox's own datagrams while it waits,
// so two ranks sending to each other cannot block each other.
#ifndef RESHARD_LIVE_CUDA_IPC_IPC_MAILBOX_H_
#define RESHARD_LIVE_CUDA_IPC_IPC_MAILBOX_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reshard/status.h"

namespace reshard::internal {

constexpr uint64_t kMailboxChunk = uint64_t{32} << 10;

class IpcMailbox {
 public:
  using Clock = std::chrono::steady_clock;

  // A new mailbox of this process.
  static Result<std::unique_ptr<IpcMailbox>> Open();
  ~IpcMailbox();
  IpcMailbox(const IpcMailbox&) = delete;
  IpcMailbox& operator=(const IpcMailbox&) = delete;

  // Its name (without the abstract namespace's leading NUL).
  const std::string& name() const { return name_; }

  // Sends `length` bytes to the mailbox `to` as rank `from`, tagged `tag`.
  // Unavailable when that mailbox is gone (its process exited or closed
  // it) or at `deadline`.
  Status Send(const std::string& to, uint32_t from, uint64_t tag,
              const uint8_t* bytes, uint64_t length,
              Clock::time_point deadline);

  // The message rank `from` sent tagged `tag`, waiting for it until
  // `deadline` (Unavailable "timed out"), polling `poll_abort` about every
  // `poll_interval` (its error ends the wait).
  Result<std::vector<uint8_t>> Receive(
      uint32_t from, uint64_t tag, Clock::time_point deadline,
      const std::function<Status()>& poll_abort,
      std::chrono::milliseconds poll_interval);

  // Forgets what rank `from` sent (a peer disconnected).
  void Drop(uint32_t from);

 private:
  struct Partial {
    std::vector<uint8_t> bytes;
    uint64_t filled = 0;
  };

  IpcMailbox(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

  // Takes the datagrams waiting, waiting at most `wait` for the first.
  void Drain(std::chrono::milliseconds wait);

  int fd_;
  std::string name_;
  std::map<std::pair<uint32_t, uint64_t>, Partial> partial_;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> complete_;
};

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_CUDA_IPC_IPC_MAILBOX_H_
