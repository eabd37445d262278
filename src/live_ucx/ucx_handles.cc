#include "live_ucx/ucx_handles.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace reshard::internal {

Status FromUcs(ucs_status_t status, const std::string& what) {
  if (status == UCS_OK) return Status::OK();
  std::string msg = what + ": " + ucs_status_string(status);
  switch (status) {
    case UCS_ERR_NO_MEMORY:
      return Status::ResourceExhausted(std::move(msg));
    case UCS_ERR_CANCELED:
      return Status::Aborted(std::move(msg));
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_TIMED_OUT:
      return Status::Unavailable(std::move(msg));
    default:
      return Status::IOError(std::move(msg));
  }
}

UcxErrorHandling ResolveErrorHandling(const UcxOptions& options) {
  if (options.error_handling != UcxErrorHandling::kAuto) {
    return options.error_handling;
  }
  return options.tls == "tcp" ? UcxErrorHandling::kPeer
                              : UcxErrorHandling::kNone;
}

namespace {

// Whether the transports `tls` (UCX_TLS syntax) can include posix or sysv
// shared memory, so that their settings are used (UCX warns of unused
// ones). A "^" list excludes; an empty one is UCX's default (all).
bool MaySelectSharedMemory(std::string_view tls) {
  if (tls.empty()) return true;
  const bool exclude = tls.front() == '^';
  if (exclude) tls.remove_prefix(1);
  bool named = false;
  while (!tls.empty()) {
    const size_t comma = tls.find(',');
    const std::string_view name = tls.substr(0, comma);
    named = named || name == "all" || name == "sm" || name == "shm" ||
            name == "mm" || name == "posix" || name == "sysv";
    tls.remove_prefix(comma == std::string_view::npos ? tls.size() : comma + 1);
  }
  return exclude ? !named : named;
}

}  // namespace

Result<UcxContext> UcxContext::Make(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  RESHARD_RETURN_NOT_OK(FromUcs(ucp_config_read(nullptr, nullptr, &config),
                                "cannot read UCX configuration"));
  if (options.shm_segment_bytes >= 65536) {
    ucp_config_release(config);
    return Status::InvalidArgument("UCX shared-memory segment of " +
                                   std::to_string(options.shm_segment_bytes) +
                                   " bytes: UCX 1.13 needs it below 65536");
  }
  std::vector<std::pair<std::string, std::string>> settings;
  // The mm transports' common setting ("MM_" is their shared prefix;
  // UCX 1.13 reports POSIX_SEG_SIZE passed here as unused). Anything the
  // user named, here or in UCX_* variables, is left alone.
  if (options.shm_segment_bytes != 0 && MaySelectSharedMemory(options.tls)) {
    bool named = false;
    for (const char* name :
         {"MM_SEG_SIZE", "POSIX_SEG_SIZE", "SYSV_SEG_SIZE"}) {
      named = named ||
              std::getenv((std::string("UCX_") + name).c_str()) != nullptr ||
              std::any_of(options.config.begin(), options.config.end(),
                          [&](const auto& kv) { return kv.first == name; });
    }
    if (!named) {
      settings.emplace_back("MM_SEG_SIZE",
                            std::to_string(options.shm_segment_bytes));
    }
  }
  settings.insert(settings.end(), options.config.begin(), options.config.end());
  if (!options.tls.empty()) settings.emplace_back("TLS", options.tls);
  if (!options.net_devices.empty()) {
    settings.emplace_back("NET_DEVICES", options.net_devices);
  }
  for (const auto& [name, value] : settings) {
    const ucs_status_t st =
        ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return FromUcs(st, "invalid UCX setting " + name + "=" + value);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  RESHARD_RETURN_NOT_OK(FromUcs(st, "cannot initialise UCX"));
  return UcxContext(context);
}

UcxContext::~UcxContext() {
  if (handle_ != nullptr) ucp_cleanup(handle_);
}

Result<uint64_t> UcxContext::MemoryTypes() const {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  RESHARD_RETURN_NOT_OK(FromUcs(ucp_context_query(handle_, &attr),
                                "cannot query the UCX context"));
  return attr.memory_types;
}

Result<std::vector<MemoryKind>> UcxMemoryKinds(uint64_t memory_types,
                                               UcxMemorySetting setting) {
  const bool cuda = (memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  if (setting == UcxMemorySetting::kCuda && !cuda) {
    return Status::FailedPrecondition(
        "peer exchange \"ucx\": setting memory=\"cuda\", but this UCX has "
        "no CUDA support (its context reports no CUDA memory type)");
  }
  if (cuda && setting != UcxMemorySetting::kHost) {
    return std::vector<MemoryKind>{MemoryKind::kHost, MemoryKind::kCuda};
  }
  return std::vector<MemoryKind>{MemoryKind::kHost};
}

Result<UcxWorker> UcxWorker::Make(const UcxContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  RESHARD_RETURN_NOT_OK(
      FromUcs(ucp_worker_create(context.get(), &params, &worker),
              "cannot create UCX worker"));
  int efd = -1;
  if (ucp_worker_get_efd(worker, &efd) != UCS_OK) efd = -1;
  return UcxWorker(worker, efd);
}

namespace {

// Receives and drops the tagged messages the worker still holds
// unexpected (a peer's sends of an update this rank failed before
// receiving them), so that destroying the worker does not warn about
// each on stderr. Bounded: a message whose rendezvous cannot complete
// (its sender gone) is cancelled once the time is up.
void DrainUnexpected(ucp_worker_h worker) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message =
        ucp_tag_probe_nb(worker, 0, 0, /*remove=*/1, &info);
    if (message == nullptr) return;
    std::vector<uint8_t> scratch(std::max<size_t>(info.length, 1));
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(
        worker, scratch.data(), info.length, message, &param);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) continue;
    while (ucp_request_check_status(request) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker);
    }
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_request_cancel(worker, request);
      for (int spins = 0;
           spins < 10000 && ucp_request_check_status(request) == UCS_INPROGRESS;
           ++spins) {
        ucp_worker_progress(worker);
      }
    }
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      // Still writable by UCX until the worker goes: kept, reachable.
      static auto* mu = new std::mutex;
      static auto* kept = new std::vector<std::vector<uint8_t>>;
      std::lock_guard<std::mutex> lock(*mu);
      kept->push_back(std::move(scratch));
    }
    ucp_request_free(request);
  }
}

}  // namespace

UcxWorker::~UcxWorker() {
  if (handle_ == nullptr) return;
  DrainUnexpected(handle_);
  ucp_worker_destroy(handle_);
}

Result<std::string> UcxWorker::Address() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  RESHARD_RETURN_NOT_OK(
      FromUcs(ucp_worker_get_address(handle_, &address, &length),
              "cannot get UCX worker address"));
  std::string out(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(handle_, address);
  return out;
}

void UcxWorker::ProgressOrWait(std::chrono::microseconds idle_wait) {
  if (ucp_worker_progress(handle_) != 0) {
    idle_spins_ = 0;
    return;
  }
  // Spin a little (latency), then sleep on the event descriptor
  // (throughput of the other processes on a loaded machine).
  if (++idle_spins_ < 64) return;
  idle_spins_ = 0;
  if (efd_ < 0) return;
  if (ucp_worker_arm(handle_) != UCS_OK) return;  // busy: progress again
  pollfd p{efd_, POLLIN, 0};
  const int ms =
      static_cast<int>(std::max<int64_t>(1, idle_wait.count() / 1000));
  ::poll(&p, 1, ms);
}

Status CheckWorkerAddress(std::string_view peer, std::string_view own) {
  // [ header (8 bits: version in the low 4) | worker uuid (64 bits) | ... ]
  constexpr size_t kMinBytes = 9;
  constexpr unsigned kVersionMask = 0x0F;
  if (peer.size() < kMinBytes || own.empty()) {
    return Status::InvalidArgument("UCX worker address of " +
                                   std::to_string(peer.size()) +
                                   " bytes is too short");
  }
  const unsigned peer_version =
      static_cast<unsigned char>(peer[0]) & kVersionMask;
  const unsigned own_version =
      static_cast<unsigned char>(own[0]) & kVersionMask;
  if (peer_version != own_version) {
    return Status::InvalidArgument("UCX worker address has format version " +
                                   std::to_string(peer_version) +
                                   ", this UCX writes version " +
                                   std::to_string(own_version));
  }
  return Status::OK();
}

Status CheckPackedRemoteKey(std::string_view packed, bool accept_cuda) {
  constexpr size_t kMapBytes = 8;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("packed UCX remote key of " +
                                   std::to_string(packed.size()) +
                                   " bytes: " + why);
  };
  if (packed.size() < kMapBytes + 1) return bad("too short");
  uint64_t md_map = 0;
  std::memcpy(&md_map, packed.data(), kMapBytes);
  if (md_map == 0) return bad("no memory domain");
  const auto memory_type = static_cast<unsigned char>(packed[kMapBytes]);
  const bool cuda = memory_type == UCS_MEMORY_TYPE_CUDA ||
                    memory_type == UCS_MEMORY_TYPE_CUDA_MANAGED;
  if (memory_type != UCS_MEMORY_TYPE_HOST && !(accept_cuda && cuda)) {
    return bad(
        "memory type " + std::to_string(memory_type) +
        (accept_cuda ? " is not host or CUDA memory" : " is not host memory"));
  }
  size_t at = kMapBytes + 1;
  for (int i = 0; i < __builtin_popcountll(md_map); ++i) {
    if (at >= packed.size()) return bad("keys run past the end");
    at += 1 + static_cast<unsigned char>(packed[at]);
  }
  if (at > packed.size()) return bad("keys run past the end");
  return Status::OK();
}

Result<std::unique_ptr<UcxEndpoint>> UcxEndpoint::Connect(
    const UcxWorker& worker, const std::string& peer_address,
    std::string peer_name, UcxErrorHandling error_handling) {
  const bool peer_errors = error_handling == UcxErrorHandling::kPeer;
  RESHARD_ASSIGN_OR_RETURN(std::string own, worker.Address());
  Status valid = CheckWorkerAddress(peer_address, own);
  if (!valid.ok()) return valid.WithContext("cannot connect to " + peer_name);
  std::unique_ptr<UcxEndpoint> ep(
      new UcxEndpoint(worker.get(), std::move(peer_name)));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxEndpoint::OnError;
  params.err_handler.arg = ep.get();
  if (!peer_errors) {
    params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                           UCP_EP_PARAM_FIELD_ERR_HANDLER);
  }
  ucs_status_t st = ucp_ep_create(worker.get(), &params, &ep->handle_);
  if (st == UCS_ERR_UNREACHABLE && peer_errors) {
    // Some transports (UCX_TLS=sm, for example) cannot report peer
    // failures; connect without, and rely on the session timeout.
    params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                           UCP_EP_PARAM_FIELD_ERR_HANDLER);
    st = ucp_ep_create(worker.get(), &params, &ep->handle_);
  }
  RESHARD_RETURN_NOT_OK(FromUcs(st, "cannot connect to " + ep->peer_name_));
  return ep;
}

void UcxEndpoint::OnError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<UcxEndpoint*>(arg);
  if (self->failure_.ok()) {
    self->failure_ = FromUcs(status, "lost " + self->peer_name_);
  }
}

UcxEndpoint::~UcxEndpoint() {
  if (handle_ == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(handle_, &param);
  if (UCS_PTR_IS_PTR(req)) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_);
    }
    if (ucp_request_check_status(req) == UCS_INPROGRESS) {
      ucp_request_cancel(worker_, req);
    }
    ucp_request_free(req);
  }
}

bool UcxEndpoint::Close(std::chrono::microseconds wait) {
  if (handle_ == nullptr) return true;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(std::exchange(handle_, nullptr), &param);
  if (!UCS_PTR_IS_PTR(req)) return true;  // closed at once (or failed)
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker_);
  }
  const bool closed = ucp_request_check_status(req) != UCS_INPROGRESS;
  ucp_request_free(req);  // UCX releases a pending one when it completes
  return closed;
}

void KeepUntilExit(void* kept) {
  static std::mutex mu;
  static auto* const held = new std::vector<void*>();
  std::lock_guard<std::mutex> lock(mu);
  held->push_back(kept);
}

Result<std::unique_ptr<UcxMemory>> UcxMemory::Map(const UcxContext& context,
                                                  void* address,
                                                  uint64_t length) {
  std::unique_ptr<UcxMemory> m(new UcxMemory(
      context.get(), reinterpret_cast<uint64_t>(address), length));
  // The memory type is left to UCX's detection (no
  // UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE): a registration is handed an
  // address only, and UCX built with CUDA support recognises device
  // memory itself and packs a key of its type (CheckPackedRemoteKey).
  ucp_mem_map_params_t params{};
  params.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = length;
  RESHARD_RETURN_NOT_OK(
      FromUcs(ucp_mem_map(context.get(), &params, &m->handle_),
              "cannot register " + std::to_string(length) + " bytes with UCX"));
  void* key = nullptr;
  size_t size = 0;
  RESHARD_RETURN_NOT_OK(
      FromUcs(ucp_rkey_pack(context.get(), m->handle_, &key, &size),
              "cannot pack a UCX remote key"));
  m->packed_key_.assign(static_cast<const char*>(key), size);
  ucp_rkey_buffer_release(key);
  return m;
}

Result<ucs_memory_type_t> DetectMemoryType(const UcxContext& context,
                                           const void* address) {
  ucp_mem_map_params_t params{};
  params.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = const_cast<void*>(address);
  params.length = 1;
  ucp_mem_h memh = nullptr;
  RESHARD_RETURN_NOT_OK(FromUcs(ucp_mem_map(context.get(), &params, &memh),
                                "cannot register 1 byte with UCX"));
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
  const ucs_status_t st = ucp_mem_query(memh, &attr);
  ucp_mem_unmap(context.get(), memh);
  RESHARD_RETURN_NOT_OK(FromUcs(st, "cannot query a UCX registration"));
  return attr.mem_type;
}

UcxMemory::~UcxMemory() {
  if (handle_ != nullptr) ucp_mem_unmap(context_, handle_);
}

Result<std::unique_ptr<UcxRemoteKey>> UcxRemoteKey::Unpack(
    const UcxEndpoint& endpoint, const std::string& packed, bool accept_cuda) {
  Status valid = CheckPackedRemoteKey(packed, accept_cuda);
  if (!valid.ok()) {
    return valid.WithContext("cannot unpack the remote key of " +
                             endpoint.peer_name());
  }
  ucp_rkey_h rkey = nullptr;
  RESHARD_RETURN_NOT_OK(
      FromUcs(ucp_ep_rkey_unpack(endpoint.get(), packed.data(), &rkey),
              "cannot unpack the remote key of " + endpoint.peer_name()));
  return std::unique_ptr<UcxRemoteKey>(new UcxRemoteKey(rkey));
}

UcxRemoteKey::~UcxRemoteKey() {
  if (handle_ != nullptr) ucp_rkey_destroy(handle_);
}

}  // namespace reshard::internal
