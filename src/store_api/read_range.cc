#include "reshard/sdk/object_store.h"

namespace reshard {

bool RangeContinues(const ReadRange& prev, const ReadRange& next) {
  const uint64_t end = prev.offset + prev.length;
  return end >= prev.offset && next.offset == end &&
         next.offset + next.length >= next.offset && next.key == prev.key;
}

}  // namespace reshard
