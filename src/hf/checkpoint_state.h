// The open files behind an HfCheckpoint, and the read-only ObjectStore
// over them through which the store's ranged loader reads a checkpoint.

#ifndef RESHARD_HF_CHECKPOINT_STATE_H_
#define RESHARD_HF_CHECKPOINT_STATE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/hf.h"
#include "reshard/sdk/object_store.h"
#include "util/file_io.h"

namespace reshard {

struct HfCheckpoint::State {
  std::string dir;
  std::vector<CheckpointFile> files;          // sorted by name
  std::vector<internal::FileDescriptor> fds;  // aligned with files
  std::vector<CheckpointTensor> tensors;      // sorted by name
  uint64_t tensor_bytes = 0;
  uint64_t header_bytes = 0;
};

namespace internal {

// The key prefix of a checkpoint source's objects: object
// "<kCheckpointGroup>/payload/<file name>" is that file.
inline constexpr std::string_view kCheckpointGroup = "hf-checkpoint";
std::string CheckpointObjectKey(std::string_view file);

// Objects are the checkpoint's files (read-only, opened once by
// HfCheckpoint::Open); there are no records and nothing can be written.
std::unique_ptr<ObjectStore> MakeCheckpointObjectStore(
    std::shared_ptr<HfCheckpoint::State> state);

}  // namespace internal
}  // namespace reshard

#endif  // RESHARD_HF_CHECKPOINT_STATE_H_
