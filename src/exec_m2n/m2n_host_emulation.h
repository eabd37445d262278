// ncclReshard emulated over host memory, for ranks that are threads of one
// process: what a lowered tensor (m2n_lowering.h) means, computed from its
// two descriptors alone, as DTensor reads them, and a collective that moves
// the bytes accordingly. It never looks at a plan, so it checks the
// lowering independently: a descriptor that does not describe the boxes
// the ranks hold moves the wrong bytes (or is refused), and a test that
// compares every target byte with the global-index fill sees it.
//
// DTensor semantics of one side (M2nSide), as nccl_m2n.h states them:
//  - the mesh's ranks are [start_rank, start_rank + prod(dims)), row-major
//    over `dims` (the last mesh axis fastest);
//  - placements[a] is kReplicate (every coordinate of axis a holds the
//    same data) or a tensor dimension d (axis a splits d into dims[a]
//    chunks, the rank at coordinate c of axis a holding chunk c; several
//    axes splitting one dimension nest in axis order, axis 0 outermost);
//  - local_shape is every rank's local tensor, contiguous row-major; the
//    global shape is local_shape times each dimension's shard factor.
//
// The collective (HostM2nComm): every rank of the communicator posts one
// group (ncclM2nGroupStart/End) of tensors, the same tensors in the same
// order on every rank (compared field by field: a difference is
// ncclInvalidUsage on every rank), with its own buffers. The last rank to
// post checks every descriptor as ncclReshard would (mesh inside the
// communicator, a placement per mesh axis, 1 to 3 tensor dimensions,
// both sides' global shapes equal, a buffer on every rank of each side)
// and then fills every target rank's buffer from the source ranks'
// (of the replicas of a chunk, the one with the lowest rank), so that
// Poll() reports the group done on every rank.

#ifndef RESHARD_EXEC_M2N_M2N_HOST_EMULATION_H_
#define RESHARD_EXEC_M2N_M2N_HOST_EMULATION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_lowering.h"
#include "reshard/dims.h"
#include "reshard/status.h"

namespace reshard::m2n {

// Bytes of one element of `dtype`.
size_t M2nDtypeBytes(M2nDtype dtype);

// The global shape `side` describes: local_shape times each tensor
// dimension's shard factor.
Dims SideGlobalShape(const M2nSide& side);

// The global box communicator rank `rank` holds of `side` (its local
// tensor: offset and local_shape); nullopt when the rank is not in the
// side's mesh.
std::optional<M2nBox> SideBox(const M2nSide& side, int rank);

// What ncclReshard refuses of `tensor` on a communicator of `comm_size`
// ranks, as "ncclInvalidArgument: ..."; "" when it takes it.
std::string CheckM2nDescriptor(const M2nTensor& tensor, int comm_size);

// One emulated communicator's ncclReshard groups. Thread-safe.
class HostM2nComm {
 public:
  // The communicator `key` names (an NCCL unique id's hex, say) for `size`
  // ranks: made by the first rank that joins, shared by the others, gone
  // when the last member drops it. InvalidArgument when it exists with
  // another size.
  static Result<std::shared_ptr<HostM2nComm>> Join(const std::string& key,
                                                   int size);

  int size() const { return size_; }

  // Rank `rank`'s part of its next group: `tensors` (the same on every
  // rank) and its buffers of each (buffers[i] of tensors[i]; null on a
  // side the rank is not in). Returns at once; the last rank to post
  // moves the group's bytes.
  Status Post(int rank, const std::vector<M2nTensor>& tensors,
              const std::vector<M2nBuffers>& buffers);

  // Whether the group `rank` posted last is done (every rank posted and
  // the bytes moved); the group's error, the same on every rank, when the
  // ranks' tensors differ or a descriptor is refused.
  Result<bool> Poll(int rank);

  // Withdraws `rank`'s posted group if it is not done (an abandoned run:
  // its buffers are never touched; the other ranks' then never complete,
  // as NCCL's would not) and returns true; false when it is done already
  // (Poll reports how it ended).
  bool Abort(int rank);

  explicit HostM2nComm(int size) : size_(size), next_(size, 0) {}

 private:
  struct Group {
    std::vector<M2nTensor> tensors;  // as the first rank posted them
    std::vector<std::vector<M2nBuffers>> buffers;  // by rank
    std::vector<bool> posted;                      // by rank
    int count = 0;
    bool done = false;
    std::string error;
  };
  // Moves every tensor of `g` (lock held, every rank posted).
  std::string Move(Group& g) const;

  const int size_;
  std::mutex mu_;
  std::vector<uint64_t> next_;        // each rank's next group
  std::map<uint64_t, Group> groups_;  // by sequence number
};

}  // namespace reshard::m2n

#endif  // RESHARD_EXEC_M2N_M2N_HOST_EMULATION_H_
