// The NCCL library behind the seam (nccl_api.h). Built only with
// RESHARD_CUDA where cmake/nccl.cmake finds NCCL (RESHARD_NCCL_BUILT=1).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "exec_nccl/nccl_api.h"

namespace reshard::nccl {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes),
              "ncclUniqueId is 128 bytes");

Status Check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::OK();
  std::string message = std::string(ncclGetErrorString(r)) + " (" + call + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message += ": " + std::string(last);
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
    return Status::InvalidArgument(message);
  }
  if (r == ncclRemoteError || r == ncclSystemError) {
    return Status::Unavailable(message);
  }
  return Status::Internal(message);
}

ncclComm_t Comm(CommHandle comm) { return reinterpret_cast<ncclComm_t>(comm); }
cudaStream_t Stream(cuda::StreamHandle s) {
  return reinterpret_cast<cudaStream_t>(s);
}

class LibraryNcclApi final : public NcclApi {
 public:
  std::string Version() override {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on.
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
           "." + std::to_string(v % 100);
  }

  Result<NcclUniqueId> GetUniqueId() override {
    ncclUniqueId raw;
    RESHARD_RETURN_NOT_OK(Check(ncclGetUniqueId(&raw), "ncclGetUniqueId"));
    NcclUniqueId id;
    std::memcpy(id.bytes.data(), &raw, sizeof(raw));
    return id;
  }

  Result<CommHandle> CommInitRank(int nranks, const NcclUniqueId& id, int rank,
                                  int device) override {
    if (cudaSetDevice(device) != cudaSuccess) {
      return Status::InvalidArgument("cudaSetDevice(" + std::to_string(device) +
                                     ") failed");
    }
    ncclUniqueId raw;
    std::memcpy(&raw, id.bytes.data(), sizeof(raw));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    RESHARD_RETURN_NOT_OK(
        Check(ncclCommInitRankConfig(&comm, nranks, raw, rank, &config),
              "ncclCommInitRankConfig"));
    return reinterpret_cast<CommHandle>(comm);
  }

  Result<AsyncState> CommGetAsyncError(CommHandle comm) override {
    ncclResult_t state = ncclSuccess;
    RESHARD_RETURN_NOT_OK(Check(ncclCommGetAsyncError(Comm(comm), &state),
                                "ncclCommGetAsyncError"));
    if (state == ncclInProgress) return AsyncState::kInProgress;
    RESHARD_RETURN_NOT_OK(Check(state, "asynchronous error"));
    return AsyncState::kSuccess;
  }

  Status CommAbort(CommHandle comm) override {
    return Check(ncclCommAbort(Comm(comm)), "ncclCommAbort");
  }
  Status CommDestroy(CommHandle comm) override {
    return Check(ncclCommDestroy(Comm(comm)), "ncclCommDestroy");
  }
  Status GroupStart() override {
    return Check(ncclGroupStart(), "ncclGroupStart");
  }
  Status GroupEnd() override { return Check(ncclGroupEnd(), "ncclGroupEnd"); }

  Status Send(const void* buffer, size_t count, NcclDataType type, int peer,
              CommHandle comm, cuda::StreamHandle stream) override {
    return Check(ncclSend(buffer, count, static_cast<ncclDataType_t>(type),
                          peer, Comm(comm), Stream(stream)),
                 "ncclSend");
  }
  Status Recv(void* buffer, size_t count, NcclDataType type, int peer,
              CommHandle comm, cuda::StreamHandle stream) override {
    return Check(ncclRecv(buffer, count, static_cast<ncclDataType_t>(type),
                          peer, Comm(comm), Stream(stream)),
                 "ncclRecv");
  }
};

// NcclDataType's values are ncclDataType_t's.
static_assert(static_cast<int>(NcclDataType::kInt8) == ncclInt8);
static_assert(static_cast<int>(NcclDataType::kUint8) == ncclUint8);
static_assert(static_cast<int>(NcclDataType::kInt32) == ncclInt32);
static_assert(static_cast<int>(NcclDataType::kUint32) == ncclUint32);
static_assert(static_cast<int>(NcclDataType::kInt64) == ncclInt64);
static_assert(static_cast<int>(NcclDataType::kUint64) == ncclUint64);

}  // namespace

bool NcclLibraryBuilt() { return true; }

Result<std::unique_ptr<NcclApi>> MakeNcclLibraryApi() {
  return std::unique_ptr<NcclApi>(new LibraryNcclApi);
}

}  // namespace reshard::nccl
