// Move-only owners of UCX resources: context, worker and endpoints. Each
// releases its handle exactly once; an endpoint records its peer's failure
// (reported by UCX's error handler) so that the executor can fail closed.

#ifndef RESHARD_LIVE_UCX_UCX_HANDLES_H_
#define RESHARD_LIVE_UCX_UCX_HANDLES_H_

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/backends/ucx_options.h"
#include "reshard/status.h"

namespace reshard::internal {

// A UCX status as a reshard Status with `what` as context.
Status FromUcs(ucs_status_t status, const std::string& what);

// Checks a peer's packed worker address before UCX parses it (UCX asserts
// instead of failing on a malformed one): at least the header and worker id
// (9 bytes) and the same address format version as `own`, this process's
// worker address (every rank runs the same UCX release).
Status CheckWorkerAddress(std::string_view peer, std::string_view own);

// Checks a peer's packed remote key before UCX unpacks it: UCX 1.13 packs
// a 64-bit memory-domain map, a memory-type byte and one length-prefixed
// key per memory domain in the map. The map must be non-empty, the memory
// host memory (or, with `accept_cuda`, for an exchange that declared CUDA
// memory, CUDA or CUDA managed memory) and every key within the bytes.
Status CheckPackedRemoteKey(std::string_view packed, bool accept_cuda);

// The memory kinds the "ucx" exchange declares, from `memory_types` (what
// ucp_context_query reports: a mask of UCS_BIT(ucs_memory_type_t)) and the
// "memory" setting: {kHost, kCuda} where UCX supports UCS_MEMORY_TYPE_CUDA
// and the setting is auto or cuda, {kHost} for host or where UCX lacks it;
// cuda without UCX support is FailedPrecondition naming the setting.
Result<std::vector<MemoryKind>> UcxMemoryKinds(uint64_t memory_types,
                                               UcxMemorySetting setting);

// Holds `kept` until the process exits, never freeing it: what UCX may
// still use (an abandoned operation's state, the argument of an endpoint
// whose close is still pending). Held rather than dropped, so leak
// checkers see it as kept on purpose.
void KeepUntilExit(void* kept);

// Resolves kAuto (see UcxErrorHandling): kPeer or kNone.
UcxErrorHandling ResolveErrorHandling(const UcxOptions& options);

class UcxContext {
 public:
  // Reads UCX's configuration (UCX_* environment variables apply), then
  // overrides it with `options` (TLS, NET_DEVICES, extra settings).
  static Result<UcxContext> Make(const UcxOptions& options);
  UcxContext(UcxContext&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)) {}
  UcxContext& operator=(UcxContext&&) = delete;
  UcxContext(const UcxContext&) = delete;
  ~UcxContext();

  ucp_context_h get() const { return handle_; }
  // The memory types UCX moves (ucp_context_attr_t::memory_types, a mask
  // of UCS_BIT(ucs_memory_type_t)): host, and CUDA where UCX was built
  // with CUDA support and its CUDA transports loaded.
  Result<uint64_t> MemoryTypes() const;
  // Gives the handle up without cleanup (see UcxWorker::Abandon).
  void Abandon() { handle_ = nullptr; }

 private:
  explicit UcxContext(ucp_context_h h) : handle_(h) {}
  ucp_context_h handle_;
};

class UcxWorker {
 public:
  // A single-threaded worker with a wake-up file descriptor.
  static Result<UcxWorker> Make(const UcxContext& context);
  UcxWorker(UcxWorker&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), efd_(other.efd_) {}
  UcxWorker& operator=(UcxWorker&&) = delete;
  UcxWorker(const UcxWorker&) = delete;
  ~UcxWorker();

  ucp_worker_h get() const { return handle_; }
  // The worker's address, to publish for peers.
  Result<std::string> Address() const;
  // Progresses; when nothing moved, sleeps on the wake-up descriptor for at
  // most `idle_wait` (so idle processes leave the CPU to busy ones).
  void ProgressOrWait(std::chrono::microseconds idle_wait);
  // Gives the worker up without destroying it. After a peer failure,
  // UCX 1.13's TCP transport can fail an internal assertion when the
  // worker is progressed or torn down again, so a failed session abandons
  // its UCX resources instead of progressing them.
  void Abandon() { handle_ = nullptr; }

 private:
  UcxWorker(ucp_worker_h h, int efd) : handle_(h), efd_(efd) {}
  ucp_worker_h handle_;
  int efd_;
  uint32_t idle_spins_ = 0;
};

// An endpoint to a peer worker, with peer-failure error handling.
class UcxEndpoint {
 public:
  // With kPeer, UCX reports the peer's failure (and uses only transports
  // that can; when none can, the endpoint is created without); kNone and
  // kAuto (unresolved, see ResolveErrorHandling) do not ask for it.
  static Result<std::unique_ptr<UcxEndpoint>> Connect(
      const UcxWorker& worker, const std::string& peer_address,
      std::string peer_name, UcxErrorHandling error_handling);
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;
  // Closes the endpoint forcefully (a session only closes endpoints after
  // its completion barrier, when nothing is left to flush), progressing
  // the worker for at most a second.
  ~UcxEndpoint();

  ucp_ep_h get() const { return handle_; }
  const std::string& peer_name() const { return peer_name_; }
  // OK while the peer is healthy; else the failure UCX reported.
  const Status& failure() const { return failure_; }
  // Gives the endpoint up without closing it (see UcxWorker::Abandon).
  void Abandon() { handle_ = nullptr; }
  // Closes the endpoint forcefully (never waiting on the peer) and
  // progresses the worker for at most `wait` while UCX completes the
  // close. Returns false when UCX still holds the close then: UCX frees
  // its request when done, but this object (its error handler's argument)
  // must outlive it, so the caller keeps it until exit (KeepUntilExit).
  bool Close(std::chrono::microseconds wait);

 private:
  UcxEndpoint(ucp_worker_h worker, std::string peer_name)
      : worker_(worker), peer_name_(std::move(peer_name)) {}
  static void OnError(void* arg, ucp_ep_h ep, ucs_status_t status);

  ucp_worker_h worker_;
  ucp_ep_h handle_ = nullptr;
  std::string peer_name_;
  Status failure_;
};

// The memory type UCX detects at `address`: its first byte is registered
// and the registration released at once. Host memory is
// UCS_MEMORY_TYPE_HOST; device memory is CUDA only where UCX has CUDA
// support (without it UCX cannot tell device memory from host memory).
Result<ucs_memory_type_t> DetectMemoryType(const UcxContext& context,
                                           const void* address);

// A registration of local memory for remote access, with its packed key.
class UcxMemory {
 public:
  static Result<std::unique_ptr<UcxMemory>> Map(const UcxContext& context,
                                                void* address, uint64_t length);
  UcxMemory(const UcxMemory&) = delete;
  UcxMemory& operator=(const UcxMemory&) = delete;
  ~UcxMemory();

  uint64_t address() const { return address_; }
  uint64_t length() const { return length_; }
  const std::string& packed_key() const { return packed_key_; }
  void Abandon() { handle_ = nullptr; }

 private:
  UcxMemory(ucp_context_h context, uint64_t address, uint64_t length)
      : context_(context), address_(address), length_(length) {}
  ucp_context_h context_;
  ucp_mem_h handle_ = nullptr;
  uint64_t address_, length_;
  std::string packed_key_;
};

// A peer's key, unpacked for one endpoint.
class UcxRemoteKey {
 public:
  // `accept_cuda` as CheckPackedRemoteKey's.
  static Result<std::unique_ptr<UcxRemoteKey>> Unpack(
      const UcxEndpoint& endpoint, const std::string& packed, bool accept_cuda);
  UcxRemoteKey(const UcxRemoteKey&) = delete;
  UcxRemoteKey& operator=(const UcxRemoteKey&) = delete;
  ~UcxRemoteKey();

  ucp_rkey_h get() const { return handle_; }
  void Abandon() { handle_ = nullptr; }

 private:
  explicit UcxRemoteKey(ucp_rkey_h h) : handle_(h) {}
  ucp_rkey_h handle_;
};

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_UCX_UCX_HANDLES_H_
