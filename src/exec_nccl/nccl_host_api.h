// HostNcclApi: the NCCL seam (nccl_api.h) emulated over host memory, for
// ranks that are threads of one process, so that the NCCL exchange is
// tested without a GPU or the library.
//
// Every HostNcclApi of the process shares one fabric: a unique id that one
// of them made names a communicator the others join with CommInitRank.
// What it emulates, as NCCL documents it:
//  - initialisation is non-blocking: a communicator is kInProgress until
//    all `nranks` ranks have joined; a unique id serves one communicator
//    (a rank joining a full one is refused);
//  - a send from rank a to rank b is matched with b's receives from a in
//    the order each side posted them (NCCL's per-peer ordering; there are
//    no tags); a matched pair must move the same bytes, else both
//    communicators report ncclInvalidUsage asynchronously and the pair
//    never completes (NCCL leaves that undefined: here it is an error);
//  - calls between GroupStart and GroupEnd are posted at the outermost
//    GroupEnd (per thread); a call outside a group is posted at once;
//  - arguments are checked at the call (a null buffer with elements, an
//    unknown data type, a peer outside [0, nranks), an unknown or aborted
//    communicator, one not yet ready, an unknown stream); a refusal posts
//    nothing and its message starts with the NCCL result it stands for;
//  - work completes on an emulated stream: StreamIdle() is true once every
//    send and receive posted on it was matched and copied (work dropped by
//    CommAbort counts as done, as an aborted kernel ends);
//  - a rank that died (its communicator aborted or never used again) is
//    not reported to its peers: their receives simply never complete.
// Every method may be called from any thread.

#ifndef RESHARD_EXEC_NCCL_NCCL_HOST_API_H_
#define RESHARD_EXEC_NCCL_NCCL_HOST_API_H_

#include <mutex>
#include <string>
#include <vector>

#include "exec_nccl/nccl_api.h"

namespace reshard::nccl {

class HostNcclApi final : public NcclApi {
 public:
  HostNcclApi() = default;

  std::string Version() override { return "host emulation"; }
  Result<NcclUniqueId> GetUniqueId() override;
  Result<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                  int device) override;
  Result<AsyncState> CommGetAsyncError(CommHandle comm) override;
  Status CommAbort(CommHandle comm) override;
  Status CommDestroy(CommHandle comm) override;
  Status GroupStart() override;
  Status GroupEnd() override;
  Status Send(const void* buffer, size_t count, NcclDataType type, int peer,
              CommHandle comm, cuda::StreamHandle stream) override;
  Status Recv(void* buffer, size_t count, NcclDataType type, int peer,
              CommHandle comm, cuda::StreamHandle stream) override;

  // Emulated streams (the fabric's, usable by any HostNcclApi).
  cuda::StreamHandle CreateStream();
  // True once the stream's posted work is done; true for an unknown one.
  bool StreamIdle(cuda::StreamHandle stream);
  void DestroyStream(cuda::StreamHandle stream);

  // The calls made through this instance, in order, one line each:
  // "ncclSend(count=4096, ncclInt8, peer=1)", "ncclGroupEnd()", ...
  std::vector<std::string> calls() const;

 private:
  Status Post(bool send, void* buffer, size_t count, NcclDataType type,
              int peer, CommHandle comm, cuda::StreamHandle stream);
  // Posts this thread's queued calls (the outermost GroupEnd).
  void PostQueued();
  void Record(std::string call);

  mutable std::mutex mu_;
  std::vector<std::string> calls_;
};

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_HOST_API_H_
