// Settings of the UCX transport (src/exec/ucx/), applied on top of UCX's
// own configuration. Live sessions take them in LiveSessionOptions::ucx.

#ifndef RESHARD_UCX_OPTIONS_H_
#define RESHARD_UCX_OPTIONS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// UCX settings applied on top of UCX's own configuration (UCX_* variables).
struct UcxOptions {
  std::string tls;          // UCX_TLS, e.g. "cma,tcp" or "tcp"; empty: UCX's
  std::string net_devices;  // UCX_NET_DEVICES, e.g. "lo"; empty: UCX's
  // Any other setting, by name without the UCX_ prefix.
  std::vector<std::pair<std::string, std::string>> config;
  UcxErrorHandling error_handling = UcxErrorHandling::kAuto;
};

}  // namespace reshard

#endif  // RESHARD_UCX_OPTIONS_H_
