// The backend SDK of the weight store: objects (large, written once,
// streamed from caller memory, read by byte ranges straight into caller
// memory) plus the small create-only records of RecordStore.
//
// Thread and process contract: every method may be called concurrently from
// any thread of any process sharing the backend. Objects, like records, are
// create-only and atomic: a reader sees no object or the whole object, and
// of racing writers of one key exactly one wins (AlreadyExists for the
// others, whose bytes are discarded). Objects and records share one key
// space. A backend must pass testing/object_store_conformance.h.

#ifndef RESHARD_SDK_OBJECT_STORE_H_
#define RESHARD_SDK_OBJECT_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard {

// A range of caller memory to write from.
struct ConstBuffer {
  const void* data = nullptr;
  uint64_t size = 0;
};

// One ranged read: `length` bytes of `key` at `offset` into `dest`.
struct ReadRange {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* dest = nullptr;
};

// Whether `next` starts where `prev` ends in the same object (neither
// range overflowing). A backend may read ranges that continue each other
// as one run into their buffers in order; loads count such a run as one
// range of a request.
bool RangeContinues(const ReadRange& prev, const ReadRange& next);

class ObjectStore : public RecordStore {
 public:
  // Writes the concatenation of `parts` as object `key` without assembling
  // it in memory; AlreadyExists if the key exists (nothing is changed).
  virtual Status PutObject(std::string_view key,
                           const std::vector<ConstBuffer>& parts,
                           Durability durability = Durability::kDurable) = 0;
  // Makes every object written before the call durable.
  virtual Status Sync() = 0;
  // Reads every range; fails (naming the key and range) if any range is
  // missing or short. Ranges may target any caller memory.
  virtual Status ReadRanges(const std::vector<ReadRange>& ranges) = 0;
  // The object's size; NotFound if absent.
  virtual Result<uint64_t> ObjectSize(std::string_view key) = 0;
  // Removes what interrupted writers left behind (partial temporary
  // objects) if older than `older_than`; returns how many. Never touches a
  // published object or record.
  virtual Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) = 0;
  // The backend's URI.
  virtual const std::string& uri() const = 0;
  // The size below which a read costs about as much as a read of this
  // size (Redis: one stored value, whose part the server copies before
  // sending it), aligned at multiples of it; loads widen their sweep
  // windows to it. 0 (the default): no such size.
  virtual uint64_t PreferredReadBytes() const { return 0; }
};

}  // namespace reshard

#endif  // RESHARD_SDK_OBJECT_STORE_H_
