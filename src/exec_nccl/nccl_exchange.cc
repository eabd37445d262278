#include "exec_nccl/nccl_exchange.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "exec_nccl/nccl_exchange_impl.h"
#include "exec_nccl/nccl_host_api.h"

namespace reshard::nccl {

using Clock = std::chrono::steady_clock;

Result<NcclExchangeSettings> ParseNcclSettings(
    const PeerExchangeOptions& options) {
  NcclExchangeSettings s;
  for (const auto& [name, value] : options.settings) {
    if (name == "api") {
      if (value != "nccl" && value != "host") {
        return Status::InvalidArgument(
            "peer exchange \"nccl\": setting \"api\" takes nccl or host, got "
            "\"" +
            value + "\"");
      }
      s.host_emulation = value == "host";
    } else if (name == "device") {
      const bool digits = !value.empty() && value.size() <= 4 &&
                          std::all_of(value.begin(), value.end(), [](char c) {
                            return c >= '0' && c <= '9';
                          });
      if (!digits) {
        return Status::InvalidArgument(
            "peer exchange \"nccl\": setting \"device\" takes a CUDA device "
            "ordinal, got \"" +
            value + "\"");
      }
      s.device = std::stoi(value);
    } else if (name == "m2n") {
      if (value != "auto" && value != "off") {
        return Status::InvalidArgument(
            "peer exchange \"nccl\": setting \"m2n\" takes auto or off, got "
            "\"" +
            value + "\"");
      }
      s.m2n = value == "auto";
    } else {
      return Status::InvalidArgument(
          "peer exchange \"nccl\" has no setting \"" + name +
          "\" (it takes api, device, m2n)");
    }
  }
  return s;
}

NcclExchange::NcclExchange(uint32_t rank, std::shared_ptr<NcclApi> api,
                           std::unique_ptr<NcclMemory> memory, int device,
                           M2nMode m2n)
    : rank_(rank),
      api_(std::move(api)),
      memory_(std::move(memory)),
      device_(device),
      m2n_(m2n) {}

// Healthy communicators are destroyed, the others aborted; an abandoned
// exchange releases nothing (work may still be in flight).
NcclExchange::~NcclExchange() {
  if (abandoned_) return;
  for (auto& [peer, c] : peers_) {
    if (c.comm != 0) {
      (void)(c.ready && c.broken.ok() ? api_->CommDestroy(c.comm)
                                      : api_->CommAbort(c.comm));
    }
    if (c.stream != 0) memory_->DestroyStream(c.stream);
  }
}

// "nccl:<incarnation>:<rank>:<id for rank 0>,<id for rank 1>,...", and
// when it offers M2N "/m2n" (rank 0: "/m2n:<the M2N communicator's id>").
Result<std::string> NcclExchange::Address() {
  if (!address_.empty()) return address_;
  if (rank_ > kMaxNcclRank) {
    return Status::InvalidArgument(
        "peer exchange \"nccl\": rank " + std::to_string(rank_) +
        " would publish " + std::to_string(rank_) +
        " unique ids, more than an address record holds (the nccl exchange "
        "serves ranks 0 to " +
        std::to_string(kMaxNcclRank) + ")");
  }
  std::string ids;
  for (uint32_t r = 0; r < rank_; ++r) {
    RESHARD_ASSIGN_OR_RETURN(NcclUniqueId id, api_->GetUniqueId());
    ids_.push_back(id);
    ids += (r == 0 ? "" : ",") + UniqueIdToHex(id);
  }
  ids_used_.assign(rank_, false);
  std::random_device random;
  const uint64_t incarnation =
      (uint64_t{random()} << 32) ^ random() ^
      static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  std::string m2n;
  if (m2n_ != M2nMode::kOff) {
    NcclUniqueId world;
    if (rank_ == 0) {
      RESHARD_ASSIGN_OR_RETURN(world, api_->GetUniqueId());
    }
    mover_ =
        std::make_unique<NcclM2nMover>(rank_, api_.get(), m2n_, device_, world);
    m2n =
        std::string(kM2nMark) + (rank_ == 0 ? ":" + UniqueIdToHex(world) : "");
  }
  address_ = "nccl:" + std::to_string(incarnation) + ":" +
             std::to_string(rank_) + ":" + ids + m2n;
  return address_;
}

Result<std::string> NcclExchange::RegisterMemory(void*, uint64_t) {
  return Status::Unimplemented(
      "peer exchange \"nccl\" does not offer remote reads (kGet): it cannot "
      "register memory; a session over it pushes (protocol push or auto)");
}

Result<uint64_t> NcclExchange::ImportRemoteKey(uint32_t peer,
                                               const std::string&) {
  if (!peers_.count(peer)) {
    return Status::Internal("remote key of unconnected rank " +
                            std::to_string(peer));
  }
  return Status::Unimplemented(
      "peer exchange \"nccl\" does not offer remote reads (kGet)");
}

namespace {

// The rank and the unique ids an address carries.
Status ParseAddress(const std::string& address, const std::string& name,
                    uint32_t* rank, std::vector<std::string>* ids) {
  const auto malformed = [&] {
    return Status::InvalidArgument("cannot connect to " + name +
                                   ": malformed nccl address \"" +
                                   address.substr(0, 80) + "\"");
  };
  if (!address.starts_with("nccl:")) return malformed();
  const size_t a = address.find(':', 5);
  const size_t b = a == std::string::npos ? a : address.find(':', a + 1);
  if (b == std::string::npos || b == a + 1) return malformed();
  const std::string r = address.substr(a + 1, b - a - 1);
  if (r.size() > 9 || !std::all_of(r.begin(), r.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return malformed();
  }
  *rank = static_cast<uint32_t>(std::stoul(r));
  ids->clear();
  // The M2N suffix (nccl_m2n_mover.h) is the mover's.
  const size_t last = std::min(address.find(kM2nMark, b), address.size());
  for (size_t at = b + 1; at < last;) {
    size_t end = address.find(',', at);
    if (end == std::string::npos || end > last) end = last;
    ids->push_back(address.substr(at, end - at));
    at = end + 1;
  }
  return ids->size() == *rank ? Status::OK() : malformed();
}

}  // namespace

Status NcclExchange::Connect(uint32_t peer, const std::string& address,
                             std::string name) {
  if (peers_.count(peer)) return Status::OK();
  RESHARD_RETURN_NOT_OK(Address().status());
  uint32_t their_rank = 0;
  std::vector<std::string> their_ids;
  RESHARD_RETURN_NOT_OK(ParseAddress(address, name, &their_rank, &their_ids));
  if (their_rank != peer || peer == rank_) {
    return Status::InvalidArgument(
        "cannot connect to " + name + ": the address is rank " +
        std::to_string(their_rank) + "'s, this exchange is rank " +
        std::to_string(rank_));
  }
  NcclUniqueId id;
  if (peer < rank_) {
    if (ids_used_[peer]) {
      return Status::FailedPrecondition(
          "cannot connect to " + name +
          " again: this rank's nccl unique id "
          "for it was used by an earlier connection (a restarted lower rank "
          "is reached only by a restarted higher rank)");
    }
    ids_used_[peer] = true;
    id = ids_[peer];
  } else if (!UniqueIdFromHex(their_ids[rank_], &id)) {
    return Status::InvalidArgument("cannot connect to " + name +
                                   ": malformed nccl unique id in its address");
  }
  Connection c;
  c.name = std::move(name);
  RESHARD_ASSIGN_OR_RETURN(c.stream, memory_->CreateStream());
  Result<CommHandle> comm =
      api_->CommInitRank(2, id, peer < rank_ ? 1 : 0, device_);
  if (!comm.ok()) {
    memory_->DestroyStream(c.stream);
    return comm.status().WithContext("connecting to " + c.name);
  }
  c.comm = *comm;
  peers_.emplace(peer, std::move(c));
  ++connections_made_;
  return Status::OK();
}

// Aborted, never destroyed: the peer may be gone, and ncclCommAbort does
// not wait on it.
Status NcclExchange::Disconnect(uint32_t peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return Status::OK();
  Connection& c = it->second;
  if (c.comm != 0) (void)api_->CommAbort(c.comm);
  if (c.stream != 0) memory_->DestroyStream(c.stream);
  peers_.erase(it);
  if (mover_) mover_->Break(peer);
  return Status::OK();
}

Result<bool> NcclExchange::Ready(Connection& c) {
  if (!c.broken.ok()) return c.broken;
  if (c.ready) return true;
  Result<AsyncState> state = api_->CommGetAsyncError(c.comm);
  if (!state.ok()) {
    return Status::Unavailable(
        "the nccl communicator with " + c.name +
        " failed: " + std::string(state.status().message()));
  }
  c.ready = *state == AsyncState::kSuccess;
  return c.ready;
}

void NcclExchange::Break(Connection& c, const Status& why) {
  if (!c.broken.ok()) return;
  if (c.comm != 0) (void)api_->CommAbort(c.comm);
  c.comm = 0;
  c.broken = Status::Unavailable(
      "the nccl connection to " + c.name + " was aborted after a failed run (" +
      std::string(why.message()) + "); disconnect and connect it again");
}

Status NcclExchange::WireUp(Clock::time_point deadline,
                            const std::function<Status()>& poll_abort) {
  auto last_poll = Clock::now();
  while (true) {
    std::string waiting;
    for (auto& [peer, c] : peers_) {
      RESHARD_ASSIGN_OR_RETURN(bool ready, Ready(c));
      if (!ready) waiting += (waiting.empty() ? "" : ", ") + c.name;
    }
    if (mover_) {
      RESHARD_ASSIGN_OR_RETURN(bool ready, mover_->Ready());
      if (!ready) {
        waiting += (waiting.empty() ? "" : ", ") +
                   std::string("every rank (the M2N communicator)");
      }
    }
    if (waiting.empty()) return Status::OK();
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::Unavailable("timed out connecting to " + waiting +
                                 " (nccl communicators not ready)");
    }
    if (poll_abort && now - last_poll >= std::chrono::milliseconds(20)) {
      last_poll = now;
      RESHARD_RETURN_NOT_OK(poll_abort());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status NcclExchange::PeerFailure() const {
  for (const auto& [peer, c] : peers_) {
    if (!c.broken.ok()) return c.broken;
    if (!c.ready) continue;
    Result<AsyncState> state = api_->CommGetAsyncError(c.comm);
    if (!state.ok()) {
      return Status::Unavailable(
          "the nccl communicator with " + c.name +
          " failed: " + std::string(state.status().message()));
    }
  }
  return Status::OK();
}

// NCCL progresses its own work: nothing to do but wait.
void NcclExchange::Progress(std::chrono::microseconds idle_wait) {
  std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
      idle_wait, std::chrono::milliseconds(2)));
}

std::unique_ptr<PeerExchange> MakeNcclExchange(
    uint32_t rank, std::shared_ptr<NcclApi> api,
    std::unique_ptr<NcclMemory> memory, int device, M2nMode m2n) {
  return std::make_unique<NcclExchange>(rank, std::move(api), std::move(memory),
                                        device, m2n);
}

namespace {

Result<std::unique_ptr<PeerExchange>> Make(const PeerExchangeConfig& config) {
  RESHARD_ASSIGN_OR_RETURN(NcclExchangeSettings s,
                           ParseNcclSettings(config.options));
  if (s.host_emulation) {
    auto api = std::make_shared<HostNcclApi>();
    auto memory = MakeHostMemory(api);
    return MakeNcclExchange(config.rank, std::move(api), std::move(memory),
                            s.device, s.m2n ? M2nMode::kHost : M2nMode::kOff);
  }
  Result<std::unique_ptr<NcclApi>> library = MakeNcclLibraryApi();
  if (!library.ok()) {
    return library.status().WithContext("peer exchange \"nccl\"");
  }
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<cuda::DeviceApi> device,
                           cuda::RuntimeDeviceApi());
  return MakeNcclExchange(
      config.rank, std::move(*library),
      MakeDeviceMemory(std::move(device), s.device), s.device,
      // A rank that cannot run M2N (no plugin, no driver, an older NCCL
      // loaded first) does not offer it, so the whole session moves every
      // tensor by send/recv (rule m2n-everywhere) instead of failing.
      s.m2n && m2n::M2nUsable().ok() ? M2nMode::kLibrary : M2nMode::kOff);
}

Status CheckOptions(const PeerExchangeOptions& options) {
  return ParseNcclSettings(options).status();
}

}  // namespace

// Nothing names this file: the library links its layer whole.
static const bool kRegistered =
    RegisterPeerExchange(
        {"nccl",
         "NCCL send/receive between ranks' GPUs (api=host: the host "
         "emulation, ranks as threads)",
         &Make, &CheckOptions})
        .ok();

}  // namespace reshard::nccl
