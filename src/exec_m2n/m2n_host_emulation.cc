#include "exec_m2n/m2n_host_emulation.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace reshard::m2n {
namespace {

int64_t MeshRanks(const M2nMesh& mesh) {
  int64_t n = 1;
  for (int d : mesh.dims) n *= d;
  return n;
}

std::string SideName(bool source) { return source ? "source" : "target"; }

std::string DimsText(const Dims& dims) {
  std::string out = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    out += (d == 0 ? "" : ",") + std::to_string(dims[d]);
  }
  return out + "]";
}

// What is wrong with one side on its own ("" when nothing).
std::string CheckSide(const M2nSide& side, bool source, int comm_size) {
  const std::string what = SideName(source);
  if (side.mesh.dims.empty() ||
      side.mesh.dims.size() > static_cast<size_t>(kMaxMeshDims)) {
    return what + " mesh of " + std::to_string(side.mesh.dims.size()) +
           " dims (1 to " + std::to_string(kMaxMeshDims) + ")";
  }
  for (int d : side.mesh.dims) {
    if (d < 1) return what + " mesh dim " + std::to_string(d) + " below 1";
  }
  if (side.mesh.start_rank < 0 ||
      side.mesh.start_rank + MeshRanks(side.mesh) > comm_size) {
    return what + " mesh ranks [" + std::to_string(side.mesh.start_rank) +
           ", " + std::to_string(side.mesh.start_rank + MeshRanks(side.mesh)) +
           ") outside the communicator of " + std::to_string(comm_size);
  }
  if (side.placements.size() != side.mesh.dims.size()) {
    return what + " has " + std::to_string(side.placements.size()) +
           " placements for " + std::to_string(side.mesh.dims.size()) +
           " mesh dims";
  }
  const int ndims = static_cast<int>(side.local_shape.size());
  if (ndims < 1 || ndims > kMaxTensorDims) {
    return what + " local tensor of " + std::to_string(ndims) + " dims (1 to " +
           std::to_string(kMaxTensorDims) + ")";
  }
  for (int p : side.placements) {
    if (p != kReplicate && (p < 0 || p >= ndims)) {
      return what + " placement S(" + std::to_string(p) + ") of a " +
             std::to_string(ndims) + "-dim tensor";
    }
  }
  return "";
}

// Copies the intersection of boxes `s` (held contiguous at `src`) and `t`
// (contiguous at `dst`), `item` bytes an element, row by row.
void CopyIntersection(const M2nBox& s, const uint8_t* src, const M2nBox& t,
                      uint8_t* dst, size_t item) {
  const size_t n = s.shape.size();
  Dims lo(n), hi(n);
  for (size_t d = 0; d < n; ++d) {
    lo[d] = std::max(s.offset[d], t.offset[d]);
    hi[d] = std::min(s.offset[d] + s.shape[d], t.offset[d] + t.shape[d]);
    if (lo[d] >= hi[d]) return;
  }
  const auto row_bytes = static_cast<size_t>(hi[n - 1] - lo[n - 1]) * item;
  Dims at = lo;  // the first element of the current row
  while (true) {
    int64_t si = 0, ti = 0;  // row-major element indices in each box
    for (size_t d = 0; d < n; ++d) {
      si = si * s.shape[d] + (at[d] - s.offset[d]);
      ti = ti * t.shape[d] + (at[d] - t.offset[d]);
    }
    std::memcpy(dst + ti * item, src + si * item, row_bytes);
    size_t d = n - 1;  // next row: odometer over every dim but the last
    while (d > 0) {
      --d;
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
      if (d == 0) return;
    }
    if (n == 1) return;
  }
}

}  // namespace

size_t M2nDtypeBytes(M2nDtype dtype) {
  switch (dtype) {
    case M2nDtype::kInt8:
    case M2nDtype::kUint8:
    case M2nDtype::kFloat8e4m3:
    case M2nDtype::kFloat8e5m2:
      return 1;
    case M2nDtype::kFloat16:
    case M2nDtype::kBfloat16:
      return 2;
    case M2nDtype::kInt32:
    case M2nDtype::kUint32:
    case M2nDtype::kFloat32:
      return 4;
    case M2nDtype::kInt64:
    case M2nDtype::kUint64:
    case M2nDtype::kFloat64:
      return 8;
  }
  return 1;
}

Dims SideGlobalShape(const M2nSide& side) {
  Dims global = side.local_shape;
  for (size_t a = 0; a < side.placements.size(); ++a) {
    const int p = side.placements[a];
    if (p != kReplicate) global[p] *= side.mesh.dims[a];
  }
  return global;
}

std::optional<M2nBox> SideBox(const M2nSide& side, int rank) {
  int64_t index = rank - side.mesh.start_rank;
  if (index < 0 || index >= MeshRanks(side.mesh)) return std::nullopt;
  std::vector<int64_t> coord(side.mesh.dims.size());
  for (size_t a = side.mesh.dims.size(); a-- > 0;) {
    coord[a] = index % side.mesh.dims[a];
    index /= side.mesh.dims[a];
  }
  M2nBox box{rank, Dims(side.local_shape.size(), 0), side.local_shape};
  Dims chunk(side.local_shape.size(), 0);  // nested over the axes, in order
  for (size_t a = 0; a < coord.size(); ++a) {
    const int p = side.placements[a];
    if (p != kReplicate) chunk[p] = chunk[p] * side.mesh.dims[a] + coord[a];
  }
  for (size_t d = 0; d < chunk.size(); ++d) {
    box.offset[d] = chunk[d] * side.local_shape[d];
  }
  return box;
}

std::string CheckM2nDescriptor(const M2nTensor& tensor, int comm_size) {
  for (bool source : {true, false}) {
    const std::string e =
        CheckSide(source ? tensor.source : tensor.target, source, comm_size);
    if (!e.empty()) return "ncclInvalidArgument: ncclReshard: " + e;
  }
  const Dims s = SideGlobalShape(tensor.source);
  const Dims t = SideGlobalShape(tensor.target);
  if (s != t) {
    return "ncclInvalidArgument: ncclReshard: the source describes global "
           "shape " +
           DimsText(s) + ", the target " + DimsText(t);
  }
  return "";
}

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<HostM2nComm>> comms;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

Result<std::shared_ptr<HostM2nComm>> HostM2nComm::Join(const std::string& key,
                                                       int size) {
  if (size < 1) {
    return Status::InvalidArgument("HostM2nComm: a communicator of " +
                                   std::to_string(size) + " ranks");
  }
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<HostM2nComm> comm = r.comms[key].lock();
  if (comm == nullptr) {
    comm = std::make_shared<HostM2nComm>(size);
    r.comms[key] = comm;
  } else if (comm->size() != size) {
    return Status::InvalidArgument(
        "ncclInvalidUsage: the emulated M2N communicator has " +
        std::to_string(comm->size()) + " ranks, not " + std::to_string(size));
  }
  std::erase_if(r.comms, [](const auto& e) { return e.second.expired(); });
  return comm;
}

Status HostM2nComm::Post(int rank, const std::vector<M2nTensor>& tensors,
                         const std::vector<M2nBuffers>& buffers) {
  if (rank < 0 || rank >= size_ || tensors.size() != buffers.size()) {
    return Status::InvalidArgument(
        "ncclInvalidArgument: rank " + std::to_string(rank) + " of " +
        std::to_string(size_) + " posted " + std::to_string(tensors.size()) +
        " tensors with " + std::to_string(buffers.size()) + " buffer pairs");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Group& g = groups_[next_[rank]++];
  if (g.posted.empty()) {
    g.posted.assign(size_, false);
    g.buffers.resize(size_);
    g.tensors = tensors;
  } else if (g.error.empty()) {
    for (size_t i = 0; i < tensors.size() || i < g.tensors.size(); ++i) {
      const bool same = i < tensors.size() && i < g.tensors.size() &&
                        tensors[i].tensor_id == g.tensors[i].tensor_id &&
                        tensors[i].dtype == g.tensors[i].dtype &&
                        tensors[i].source == g.tensors[i].source &&
                        tensors[i].target == g.tensors[i].target;
      if (!same) {
        g.error =
            "ncclInvalidUsage: the ranks posted different groups of tensors "
            "(tensor " +
            std::to_string(i) + " differs)";
        break;
      }
    }
  }
  g.posted[rank] = true;
  g.buffers[rank] = buffers;
  if (++g.count == size_) {
    if (g.error.empty()) g.error = Move(g);
    g.done = true;
  }
  return Status::OK();
}

std::string HostM2nComm::Move(Group& g) const {
  for (const M2nTensor& t : g.tensors) {
    const std::string e = CheckM2nDescriptor(t, size_);
    if (!e.empty()) return e + " (tensor \"" + t.tensor_id + "\")";
  }
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const M2nTensor& t = g.tensors[i];
    for (int r = 0; r < size_; ++r) {
      const bool s = SideBox(t.source, r).has_value();
      const bool d = SideBox(t.target, r).has_value();
      if ((s && g.buffers[r][i].source == nullptr) ||
          (d && g.buffers[r][i].target == nullptr)) {
        return "ncclInvalidArgument: ncclReshard: rank " + std::to_string(r) +
               " has no " + SideName(s && g.buffers[r][i].source == nullptr) +
               " buffer of tensor \"" + t.tensor_id + "\"";
      }
    }
  }
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const M2nTensor& t = g.tensors[i];
    const size_t item = M2nDtypeBytes(t.dtype);
    // Each chunk once: the replica with the lowest rank.
    std::vector<M2nBox> chunks;
    for (int r = 0; r < size_; ++r) {
      std::optional<M2nBox> box = SideBox(t.source, r);
      if (box && std::none_of(chunks.begin(), chunks.end(), [&](auto& c) {
            return c.offset == box->offset;
          })) {
        chunks.push_back(*box);
      }
    }
    for (int r = 0; r < size_; ++r) {
      std::optional<M2nBox> want = SideBox(t.target, r);
      if (!want) continue;
      for (const M2nBox& c : chunks) {
        CopyIntersection(
            c, static_cast<const uint8_t*>(g.buffers[c.rank][i].source), *want,
            static_cast<uint8_t*>(g.buffers[r][i].target), item);
      }
    }
  }
  return "";
}

Result<bool> HostM2nComm::Poll(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 0 || rank >= size_ || next_[rank] == 0) {
    return Status::InvalidArgument("ncclInvalidUsage: rank " +
                                   std::to_string(rank) + " posted no group");
  }
  auto it = groups_.find(next_[rank] - 1);
  if (it == groups_.end()) return true;  // done, and every rank saw it
  if (!it->second.done) return false;
  const std::string error = it->second.error;
  // The last rank to see a group done drops it.
  if (it->second.posted[rank]) {
    it->second.posted[rank] = false;
    if (--it->second.count == 0) groups_.erase(it);
  }
  if (!error.empty()) return Status::Internal(error);
  return true;
}

bool HostM2nComm::Abort(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 0 || rank >= size_ || next_[rank] == 0) return false;
  auto it = groups_.find(next_[rank] - 1);
  if (it == groups_.end() || it->second.done || !it->second.posted[rank]) {
    return false;
  }
  it->second.posted[rank] = false;
  it->second.buffers[rank].clear();
  --it->second.count;
  --next_[rank];
  return true;
}

}  // namespace reshard::m2n
