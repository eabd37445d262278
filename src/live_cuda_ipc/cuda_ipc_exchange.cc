// The CUDA IPC peer exchange (cuda_ipc_exchange.h), registered as
// "cuda-ipc".
//
// A published key is kKeyBytes: a magic, the IPC handle of the allocation
// holding the registered range, the allocation's base in the exporting
// process, and the range's address and length there. A peer's address is
// "cuda-ipc:<process id>:<mailbox>": ranks of one process cannot open
// each other's handles (CUDA refuses a handle in the process that exported
// it), so Connect refuses a peer of this process.
#include "live_cuda_ipc/cuda_ipc_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec_cuda/copy_lowering.h"
#include "exec_cuda/cuda_transport.h"
#include "live_cuda_ipc/ipc_mailbox.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kKeyMagic[8] = {'c', 'u', 'd', 'a', 'i', 'p', 'c', '1'};

struct KeyBody {
  char magic[8];
  cuda::IpcMemHandle handle;
  uint64_t base;     // the allocation's base in the exporting process
  uint64_t address;  // the registered range there
  uint64_t length;
};
constexpr size_t kKeyBytes = sizeof(KeyBody);
static_assert(kKeyBytes == 96);

bool ParseNumber(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

Result<int> DeviceSetting(const PeerExchangeOptions& options) {
  int device = 0;
  for (const auto& [name, value] : options.settings) {
    uint64_t v = 0;
    if (name != "device") {
      return Status::InvalidArgument(
          "peer exchange \"cuda-ipc\" has no "
          "setting \"" +
          name + "\" (it takes: device)");
    }
    if (!ParseNumber(value, &v) || v > 1024) {
      return Status::InvalidArgument(
          "peer exchange \"cuda-ipc\": setting \"device\" must be a CUDA "
          "device ordinal, got \"" +
          value + "\"");
    }
    device = static_cast<int>(v);
  }
  return device;
}

// One allocation of a peer, opened here.
struct Opened {
  uint32_t peer;
  cuda::IpcMemHandle handle;
  uint8_t* local = nullptr;  // the allocation's base in this process
};

// An imported key: a peer's range and the opened allocation holding it.
struct Key {
  uint32_t peer;
  uint64_t base, address, length;
  size_t opened;  // index into opened_
  bool dropped = false;
};

struct Peer {
  std::string name;
  std::string mailbox;  // its IpcMailbox's name
};

class CudaIpcExchange final : public PeerExchange {
 public:
  CudaIpcExchange(std::shared_ptr<cuda::DeviceApi> api, int device,
                  uint32_t rank, std::unique_ptr<IpcMailbox> mailbox)
      : api_(std::move(api)),
        device_(device),
        rank_(rank),
        mailbox_(std::move(mailbox)) {}

  ~CudaIpcExchange() override {
    if (abandoned_) return;
    for (const auto& [peer, p] : peers_) (void)CloseOpened(peer);
    if (stream_ != 0) (void)api_->DestroyStream(stream_);
  }

  PeerExchangeCapabilities capabilities() const override {
    // Sources are device allocations (RegisterMemory exports them);
    // a get writes into device or host memory.
    return {.pull_on_one_host = true,
            .pull_every_region = true,
            .memory_kinds = {MemoryKind::kCuda, MemoryKind::kHost}};
  }

  // "cuda-ipc:<pid>:<mailbox name>".
  Result<std::string> Address() override {
    return "cuda-ipc:" + std::to_string(::getpid()) + ":" + mailbox_->name();
  }

  Result<std::string> RegisterMemory(void* address, uint64_t length) override;
  Status Connect(uint32_t peer, const std::string& address,
                 std::string name) override;

  // Closes every allocation of the peer opened here and drops its keys.
  Status Disconnect(uint32_t peer) override {
    if (!peers_.count(peer)) return Status::OK();
    Status st = CloseOpened(peer);
    mailbox_->Drop(peer);
    peers_.erase(peer);
    return st;
  }

  uint64_t connections_made() const override { return connections_made_; }

  // Nothing to wire up: a peer's memory is reached through its keys.
  Status WireUp(Clock::time_point, const std::function<Status()>&) override {
    return Status::OK();
  }

  Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                   const std::string& packed) override;

  // A peer's death is seen by the session (heartbeats, records); nothing
  // here is connected to it.
  Status PeerFailure() const override { return Status::OK(); }

  // Peers read this rank's memory without it: nothing to progress.
  void Progress(std::chrono::microseconds idle_wait) override {
    std::this_thread::sleep_for(
        std::min<std::chrono::microseconds>(idle_wait, kLongestWait));
  }

  Status Run(const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& options, ExchangeStats* stats) override;

  // The copies queued may still run: nothing is closed or destroyed.
  void Abandon() override { abandoned_ = true; }

 private:
  static constexpr std::chrono::microseconds kLongestWait{2000};

  Result<const Peer*> PeerOf(const ExchangeOp& op) const;
  Status CheckKinds(const std::vector<ExchangeOp>& ops) const;
  Status RunGets(const std::vector<ExchangeOp>& ops,
                 const ExchangeRunOptions& options,
                 const std::function<void(size_t)>& completed,
                 ExchangeStats& st);
  Status RunMessage(const ExchangeOp& op, const ExchangeRunOptions& options,
                    ExchangeStats& st);
  Status CloseOpened(uint32_t peer);
  Result<size_t> Open(uint32_t peer, const cuda::IpcMemHandle& handle);
  Status QueueGet(const ExchangeOp& op, const std::string& peer_name);
  Result<uint64_t> SourceSpan(const ExchangeOp& op, const Key& key,
                              const std::string& peer_name) const;

  std::shared_ptr<cuda::DeviceApi> api_;
  const int device_;
  const uint32_t rank_;
  std::unique_ptr<IpcMailbox> mailbox_;
  cuda::StreamHandle stream_ = 0;
  std::map<uintptr_t, cuda::IpcMemHandle> exported_;  // by allocation base
  std::map<uint32_t, Peer> peers_;
  std::vector<Opened> opened_;  // by index; local null once closed
  std::vector<Key> keys_;       // imported keys, by handle
  uint64_t connections_made_ = 0;
  bool abandoned_ = false;
};

Result<std::string> CudaIpcExchange::RegisterMemory(void* address,
                                                    uint64_t length) {
  RESHARD_ASSIGN_OR_RETURN(cuda::AllocationRange range,
                           api_->AllocationOf(address));
  const auto base = reinterpret_cast<uintptr_t>(range.base);
  const auto at = reinterpret_cast<uintptr_t>(address);
  if (at + length > base + range.bytes) {
    return Status::InvalidArgument(
        "cuda-ipc: cannot register " + std::to_string(length) +
        " bytes at offset " + std::to_string(at - base) +
        " of a device allocation of " + std::to_string(range.bytes) +
        " bytes (a range must lie in one allocation)");
  }
  auto it = exported_.find(base);
  if (it == exported_.end()) {
    RESHARD_ASSIGN_OR_RETURN(cuda::IpcMemHandle handle,
                             api_->IpcGetMemHandle(range.base));
    it = exported_.emplace(base, handle).first;
  }
  KeyBody body{};
  std::memcpy(body.magic, kKeyMagic, sizeof kKeyMagic);
  body.handle = it->second;
  body.base = base;
  body.address = at;
  body.length = length;
  return std::string(reinterpret_cast<const char*>(&body), sizeof body);
}

Status CudaIpcExchange::Connect(uint32_t peer, const std::string& address,
                                std::string name) {
  if (peers_.count(peer)) return Status::OK();
  constexpr std::string_view kPrefix = "cuda-ipc:";
  uint64_t pid = 0;
  const size_t colon = address.find(':', kPrefix.size());
  if (address.rfind(kPrefix, 0) != 0 || colon == std::string::npos ||
      !ParseNumber(address.substr(kPrefix.size(), colon - kPrefix.size()),
                   &pid) ||
      colon + 1 == address.size()) {
    return Status::InvalidArgument("cannot connect to " + name + ": \"" +
                                   address + "\" is not a cuda-ipc address");
  }
  if (pid == static_cast<uint64_t>(::getpid())) {
    return Status::FailedPrecondition(
        "cannot connect to " + name + ": it runs in this process (" +
        std::to_string(pid) +
        "), and CUDA IPC connects processes (a process cannot open the "
        "handles it exported)");
  }
  peers_.emplace(peer, Peer{std::move(name), address.substr(colon + 1)});
  ++connections_made_;
  return Status::OK();
}

Result<size_t> CudaIpcExchange::Open(uint32_t peer,
                                     const cuda::IpcMemHandle& handle) {
  for (size_t i = 0; i < opened_.size(); ++i) {
    const Opened& o = opened_[i];
    if (o.peer == peer && o.local != nullptr &&
        std::memcmp(o.handle.bytes, handle.bytes, sizeof handle.bytes) == 0) {
      return i;
    }
  }
  RESHARD_ASSIGN_OR_RETURN(void* local,
                           api_->IpcOpenMemHandle(device_, handle));
  opened_.push_back({peer, handle, static_cast<uint8_t*>(local)});
  return opened_.size() - 1;
}

Result<uint64_t> CudaIpcExchange::ImportRemoteKey(uint32_t peer,
                                                  const std::string& packed) {
  auto p = peers_.find(peer);
  if (p == peers_.end()) {
    return Status::Internal("remote key of unconnected rank " +
                            std::to_string(peer));
  }
  KeyBody body{};
  if (packed.size() == kKeyBytes) std::memcpy(&body, packed.data(), kKeyBytes);
  if (packed.size() != kKeyBytes ||
      std::memcmp(body.magic, kKeyMagic, sizeof kKeyMagic) != 0 ||
      body.address < body.base) {
    return Status::InvalidArgument(
        "remote key of " + p->second.name + " is not a cuda-ipc key (" +
        std::to_string(packed.size()) + " bytes; a key is " +
        std::to_string(kKeyBytes) + " starting \"cudaipc1\")");
  }
  Result<size_t> opened = Open(peer, body.handle);
  if (!opened.ok()) {
    return opened.status().WithContext("opening the remote key of " +
                                       p->second.name);
  }
  keys_.push_back({peer, body.base, body.address, body.length, *opened});
  return keys_.size() - 1;
}

Status CudaIpcExchange::CloseOpened(uint32_t peer) {
  Status first;
  for (Opened& o : opened_) {
    if (o.peer != peer || o.local == nullptr) continue;
    Status st = api_->IpcCloseMemHandle(o.local);
    if (first.ok()) first = st;
    o.local = nullptr;
  }
  for (Key& k : keys_) {
    if (k.peer == peer) k.dropped = true;
  }
  return first;
}

// The end of the region's source side (one past its last byte), checked
// against the key's range.
Result<uint64_t> CudaIpcExchange::SourceSpan(
    const ExchangeOp& op, const Key& key, const std::string& peer_name) const {
  const BoundRegion& r = *op.region;
  uint64_t end = r.source_address + r.inner_bytes;
  for (const OuterLoop& loop : r.loops) {
    if (loop.count > 0) end += (loop.count - 1) * loop.source_stride;
  }
  if (r.source_address < key.address || end > key.address + key.length) {
    return Status::InvalidArgument(DescribeExchangeOp(op, peer_name) +
                                   ": no key of the peer covers its source");
  }
  return end;
}

Status CudaIpcExchange::QueueGet(const ExchangeOp& op,
                                 const std::string& peer_name) {
  if (op.remote_key >= keys_.size() || keys_[op.remote_key].peer != op.peer ||
      keys_[op.remote_key].dropped) {
    return Status::InvalidArgument(
        DescribeExchangeOp(op, peer_name) + ": remote key " +
        std::to_string(op.remote_key) + " is not one imported from the peer");
  }
  const Key& key = keys_[op.remote_key];
  RESHARD_RETURN_NOT_OK(SourceSpan(op, key, peer_name).status());
  // The same region with its source where this process sees it.
  BoundRegion local = *op.region;
  local.source_address = reinterpret_cast<uint64_t>(opened_[key.opened].local) +
                         (op.region->source_address - key.base);
  RESHARD_ASSIGN_OR_RETURN(
      cuda::PointerInfo target,
      api_->Pointer(reinterpret_cast<const void*>(local.target_address)));
  cuda::LoweringLimits limits;
  limits.max_pitch = api_->MaxPitch();
  limits.kernel_allowed = target.on_device();
  RESHARD_ASSIGN_OR_RETURN(cuda::RegionWork work,
                           cuda::LowerRegion(local, limits));
  for (cuda::Copy3D c : work.copies) {
    c.kind = target.on_device() ? cuda::CopyKind::kDeviceToDevice
                                : cuda::CopyKind::kDeviceToHost;
    Status st = c.extent.depth == 1
                    ? api_->Copy2DAsync(c.dst.ptr, c.dst.pitch, c.src.ptr,
                                        c.src.pitch, c.extent.width,
                                        c.extent.height, c.kind, stream_)
                    : api_->Copy3DAsync(c, stream_);
    if (!st.ok()) return st.WithContext(DescribeExchangeOp(op, peer_name));
  }
  if (work.kernel.has_value()) {
    Status st = api_->LaunchGatherScatter(*work.kernel, stream_);
    if (!st.ok()) return st.WithContext(DescribeExchangeOp(op, peer_name));
  }
  return Status::OK();
}

Result<const Peer*> CudaIpcExchange::PeerOf(const ExchangeOp& op) const {
  auto p = peers_.find(op.peer);
  if (p == peers_.end()) {
    return Status::Internal("exchange operation names unconnected rank " +
                            std::to_string(op.peer));
  }
  return &p->second;
}

// Refuses, before anything moves, an operation this exchange does not
// carry: a message of regions (only buffers travel as messages).
Status CudaIpcExchange::CheckKinds(const std::vector<ExchangeOp>& ops) const {
  for (const ExchangeOp& op : ops) {
    RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
    if (op.kind != ExchangeOp::Kind::kGet && op.buffer == nullptr) {
      return Status::Unimplemented(
          DescribeExchangeOp(op, peer->name) +
          ": peer exchange \"cuda-ipc\" reads every region and sends none "
          "in messages (a session over it pulls: protocol auto or pull, no "
          "delta updates, no movable sources)");
    }
  }
  return Status::OK();
}

// Gets in batches of max_in_flight, each waited for before the next, with
// the deadline and the abort polled between them.
Status CudaIpcExchange::RunGets(const std::vector<ExchangeOp>& ops,
                                const ExchangeRunOptions& options,
                                const std::function<void(size_t)>& completed,
                                ExchangeStats& st) {
  std::vector<size_t> gets;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == ExchangeOp::Kind::kGet) gets.push_back(i);
  }
  if (gets.empty()) return Status::OK();
  if (stream_ == 0) {
    RESHARD_ASSIGN_OR_RETURN(stream_, api_->CreateStream(device_));
  }
  const size_t batch = std::max<uint32_t>(options.max_in_flight, 1);
  for (size_t begin = 0; begin < gets.size(); begin += batch) {
    const size_t end = std::min(gets.size(), begin + batch);
    for (size_t k = begin; k < end; ++k) {
      const ExchangeOp& op = ops[gets[k]];
      RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
      RESHARD_RETURN_NOT_OK(QueueGet(op, peer->name));
    }
    RESHARD_RETURN_NOT_OK(api_->SynchronizeStream(stream_));
    for (size_t k = begin; k < end; ++k) {
      ++st.gets;
      ++st.messages_received;
      st.bytes_received += ops[gets[k]].region->bytes;
      completed(gets[k]);
    }
    if (Clock::now() >= options.deadline && end < gets.size()) {
      return Status::Unavailable("timed out reading from the peers (" +
                                 std::to_string(gets.size() - end) +
                                 " reads left)");
    }
    if (options.poll_abort) RESHARD_RETURN_NOT_OK(options.poll_abort());
  }
  return Status::OK();
}

// A buffer message (ExchangeOp::buffer): sent, or received into the buffer.
Status CudaIpcExchange::RunMessage(const ExchangeOp& op,
                                   const ExchangeRunOptions& options,
                                   ExchangeStats& st) {
  RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
  const uint64_t tag =
      (uint64_t{options.session_tag} << 32) | op.region->region;
  if (op.kind == ExchangeOp::Kind::kSend) {
    Status sent = mailbox_->Send(peer->mailbox, rank_, tag, op.buffer,
                                 op.buffer_bytes, options.deadline);
    if (!sent.ok()) return sent.WithContext(DescribeExchangeOp(op, peer->name));
    ++st.messages_sent;
    st.bytes_sent += op.buffer_bytes;
    return Status::OK();
  }
  Result<std::vector<uint8_t>> got =
      mailbox_->Receive(op.peer, tag, options.deadline, options.poll_abort,
                        options.abort_poll_interval);
  if (!got.ok()) {
    return got.status().WithContext(DescribeExchangeOp(op, peer->name));
  }
  if (got->size() > op.buffer_bytes) {
    return Status::DataLoss(DescribeExchangeOp(op, peer->name) + ": received " +
                            std::to_string(got->size()) +
                            " bytes, expected at most " +
                            std::to_string(op.buffer_bytes));
  }
  if (!got->empty()) std::memcpy(op.buffer, got->data(), got->size());
  *op.received = got->size();
  ++st.messages_received;
  st.bytes_received += got->size();
  return Status::OK();
}

// Sends first (they never wait on a receiver), then gets, then receives.
Status CudaIpcExchange::Run(const std::vector<ExchangeOp>& ops,
                            const ExchangeRunOptions& options,
                            ExchangeStats* stats) {
  ExchangeStats unused;
  ExchangeStats& st = stats != nullptr ? *stats : unused;
  RESHARD_RETURN_NOT_OK(CheckKinds(ops));
  bool first = true;
  const auto completed = [&](size_t i) {
    if (first && options.on_first_completion) options.on_first_completion();
    first = false;
    if (options.on_completion) options.on_completion(i);
  };
  for (const ExchangeOp::Kind kind :
       {ExchangeOp::Kind::kSend, ExchangeOp::Kind::kGet,
        ExchangeOp::Kind::kReceive}) {
    if (kind == ExchangeOp::Kind::kGet) {
      RESHARD_RETURN_NOT_OK(RunGets(ops, options, completed, st));
      continue;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != kind) continue;
      RESHARD_RETURN_NOT_OK(RunMessage(ops[i], options, st));
      completed(i);
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckCudaIpcOptions(const PeerExchangeOptions& options) {
  return DeviceSetting(options).status();
}

Result<std::unique_ptr<PeerExchange>> MakeCudaIpcExchangeOver(
    std::shared_ptr<cuda::DeviceApi> api, const PeerExchangeConfig& config) {
  RESHARD_ASSIGN_OR_RETURN(int device, DeviceSetting(config.options));
  RESHARD_ASSIGN_OR_RETURN(auto mailbox, IpcMailbox::Open());
  return std::unique_ptr<PeerExchange>(new CudaIpcExchange(
      std::move(api), device, config.rank, std::move(mailbox)));
}

namespace {

Result<std::unique_ptr<PeerExchange>> MakeOverRuntime(
    const PeerExchangeConfig& config) {
  RESHARD_RETURN_NOT_OK(CheckCudaIpcOptions(config.options));
  RESHARD_ASSIGN_OR_RETURN(auto api, cuda::RuntimeDeviceApi());
  return MakeCudaIpcExchangeOver(std::move(api), config);
}

}  // namespace

// Nothing names this file: the library links its layer whole.
static const bool kRegistered =
    RegisterPeerExchange(
        {"cuda-ipc",
         "CUDA IPC between processes of one host: a rank reads its peers' "
         "device memory straight into its own (pull only)",
         &MakeOverRuntime, &CheckCudaIpcOptions})
        .ok();

}  // namespace reshard::internal
