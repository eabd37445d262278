// The collective seam of the NCCL peer exchange: the few NCCL calls it
// makes, as an interface with two implementations:
//  - the NCCL library (nccl_cuda_api.cc, built only with RESHARD_CUDA and
//    where cmake/nccl.cmake finds NCCL): MakeNcclLibraryApi();
//  - HostNcclApi (nccl_host_api.h), an emulation in which the ranks are
//    threads of one process, sends and receives are matched per (peer,
//    order) as NCCL matches them inside a group, arguments are checked as
//    NCCL documents them, and the calls are recorded.
// Everything above the seam (the exchange, nccl_exchange.h) is ordinary
// C++, tested here through the emulation.
//
// Communicators are made non-blocking (NCCL's config.blocking = 0), so that
// no call waits on a peer: CommInitRank returns while the peers are still
// joining, and CommGetAsyncError answers kInProgress until the
// communicator is ready; the caller polls it against its own deadline.
// Sends and receives are queued on a stream (a cudaStream_t for the
// library, an emulated stream for HostNcclApi) and complete there.

#ifndef RESHARD_EXEC_NCCL_NCCL_API_H_
#define RESHARD_EXEC_NCCL_NCCL_API_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "exec_cuda/device_api.h"
#include "reshard/status.h"

namespace reshard::nccl {

// ncclUniqueId: 128 opaque bytes made by one rank and handed to the others
// out of band (here: in the rank's exchange address).
struct NcclUniqueId {
  std::array<uint8_t, 128> bytes{};
  friend bool operator==(const NcclUniqueId&, const NcclUniqueId&) = default;
};

// The id as 256 lower-case hex digits, and back (false for anything else).
std::string UniqueIdToHex(const NcclUniqueId& id);
bool UniqueIdFromHex(const std::string& hex, NcclUniqueId* id);

using CommHandle = uint64_t;  // 0 is never a communicator

// ncclDataType_t's values for the types the exchange uses (it sends bytes).
enum class NcclDataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
};
// Bytes of one element; 0 for a value that is no data type.
size_t DataTypeBytes(NcclDataType type);

// What ncclCommGetAsyncError reports when it reports no error.
enum class AsyncState : uint8_t {
  kSuccess,     // ncclSuccess: ready, no error
  kInProgress,  // ncclInProgress: still initialising (non-blocking)
};

class NcclApi {
 public:
  virtual ~NcclApi() = default;

  // "2.28.9" for the library; "host emulation" for HostNcclApi.
  virtual std::string Version() = 0;

  // ncclGetUniqueId.
  virtual Result<NcclUniqueId> GetUniqueId() = 0;
  // ncclCommInitRankConfig with blocking = 0 on `device`: returns the
  // communicator at once; CommGetAsyncError says when it is ready.
  virtual Result<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id,
                                          int rank, int device) = 0;
  // ncclCommGetAsyncError: kSuccess, kInProgress, or the error as a status
  // whose message starts with NCCL's result name.
  virtual Result<AsyncState> CommGetAsyncError(CommHandle comm) = 0;
  // ncclCommAbort (never waits on the peers; pending work is dropped) and
  // ncclCommDestroy (the communicator must have nothing in flight).
  virtual Status CommAbort(CommHandle comm) = 0;
  virtual Status CommDestroy(CommHandle comm) = 0;

  // ncclGroupStart / ncclGroupEnd: the sends and receives between them
  // are posted together when the outermost group ends (per thread).
  virtual Status GroupStart() = 0;
  virtual Status GroupEnd() = 0;
  // ncclSend / ncclRecv of `count` elements of `type` to or from rank
  // `peer` of `comm`, on `stream`.
  virtual Status Send(const void* buffer, size_t count, NcclDataType type,
                      int peer, CommHandle comm, cuda::StreamHandle stream) = 0;
  virtual Status Recv(void* buffer, size_t count, NcclDataType type, int peer,
                      CommHandle comm, cuda::StreamHandle stream) = 0;
};

// The NCCL library, or Unimplemented naming the build option where this
// build has none (RESHARD_NCCL off).
Result<std::unique_ptr<NcclApi>> MakeNcclLibraryApi();

// Whether this build links the NCCL library.
bool NcclLibraryBuilt();

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_API_H_
