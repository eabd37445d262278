// The "ucx" peer exchange's options (src/live_ucx/, the only code that
// knows UCX): settings applied on top of UCX's own configuration. A live
// session takes them as neutral settings by name
// (LiveSessionOptions::exchange_options, PeerExchangeOptions); the
// functions below convert between the two. Its settings:
//   tls                UCX_TLS, e.g. "cma,tcp" or "tcp"
//   net_devices        UCX_NET_DEVICES, e.g. "lo"
//   shm_segment_bytes  decimal, below 65536 (0: UCX's own)
//   error_handling     "auto", "peer" or "none"
//   memory             "auto", "host" or "cuda" (UcxMemorySetting)
//   <NAME>             any other UCX setting, by its name in capitals
//                      without the UCX_ prefix ("RNDV_THRESH")
// Anything else is refused, naming the setting.

#ifndef RESHARD_BACKENDS_UCX_OPTIONS_H_
#define RESHARD_BACKENDS_UCX_OPTIONS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reshard/sdk/peer_exchange.h"
#include "reshard/status.h"

namespace reshard {

// Whether endpoints ask UCX to report peer failures. UCX 1.13 then drops
// every transport that cannot (CMA, posix/sysv shared memory), so the
// same-host zero-copy paths are lost: 64 MiB messages ran at 5.2 GB/s with
// it and 7.3-7.4 GB/s without (docs/live.md). Without it a dead peer is
// still seen through failed requests, the rendezvous' abort records and
// the session timeout.
enum class UcxErrorHandling : uint8_t {
  kAuto,  // peer mode when the transports are TCP only ("tcp"), else none
  kPeer,
  kNone,
};

// Which memory kinds the exchange declares (PeerExchangeCapabilities::
// memory_kinds). UCX built with CUDA support (its cuda_copy, cuda_ipc and
// gdr_copy transports) moves device memory itself, so a session hands it
// CUDA fragments directly instead of staging them in pinned host memory.
// The default is host: the exchange cannot pack strided or coalesced
// device regions (its generic datatype copies with the CPU), which the
// staged path takes, so declaring CUDA is the caller's choice.
enum class UcxMemorySetting : uint8_t {
  kAuto,  // host, and CUDA where the UCX context reports CUDA memory
  kHost,  // host only (the default): CUDA fragments are staged in host memory
  kCuda,  // host and CUDA; the exchange is not made where UCX lacks CUDA
};

// UCX settings applied on top of UCX's own configuration (UCX_* variables).
struct UcxOptions {
  std::string tls;          // UCX_TLS, e.g. "cma,tcp" or "tcp"; empty: UCX's
  std::string net_devices;  // UCX_NET_DEVICES, e.g. "lo"; empty: UCX's
  // Any other setting, by name without the UCX_ prefix.
  std::vector<std::pair<std::string, std::string>> config;
  // Shared-memory (posix and sysv) segment size in bytes (UCX_MM_SEG_SIZE):
  // how much one fragment of a message carries between processes of one
  // host. With UCX's 8,256 bytes the per-fragment cost dominates packed
  // (strided or coalesced) messages; 32 KiB moved the small-moe demo
  // layout 12% faster (docs/live.md). UCX 1.13 keeps a fragment's length
  // in 16 bits, so values of 65,536 and more are refused (65,536 aborted a
  // run, 262,144 truncated messages). 0 keeps UCX's own; a segment size
  // named in `config` or in the environment (UCX_MM_SEG_SIZE,
  // UCX_POSIX_SEG_SIZE, UCX_SYSV_SEG_SIZE) wins. The receive buffers grow
  // in steps of 512 segments (UCX_MM_RX_BUFS_GROW), 16 MiB at 32 KiB.
  uint32_t shm_segment_bytes = 32768;
  UcxErrorHandling error_handling = UcxErrorHandling::kAuto;
  UcxMemorySetting memory = UcxMemorySetting::kHost;
};

// `options` as the "ucx" exchange's settings: only those that differ from
// a default UcxOptions, then `config` in order.
PeerExchangeOptions ToPeerExchangeOptions(const UcxOptions& options);

// The UcxOptions that `options` state (see the file comment); a setting
// the "ucx" exchange does not take, or a malformed value, is
// InvalidArgument naming it.
Result<UcxOptions> UcxOptionsFromSettings(const PeerExchangeOptions& options);

}  // namespace reshard

#endif  // RESHARD_BACKENDS_UCX_OPTIONS_H_
