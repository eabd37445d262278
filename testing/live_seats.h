// Test ranks of a live session with their own host buffers: rank 0 hosts
// every source participant, rank 1 every target participant.
#ifndef RESHARD_TESTING_LIVE_SEATS_H_
#define RESHARD_TESTING_LIVE_SEATS_H_

#include <cstdint>
#include <string>

#include "reshard/live.h"
#include "reshard/placement.h"
#include "selftest/host_buffers.h"
#include "testing/must.h"

namespace reshard::testing {

struct Seat {
  internal::HostBuffers buffers;
  LiveBindings bindings;
};

// Rank `rank`'s buffers (sources on rank 0, targets on any other) and
// their bindings, under instance id `instance`.
inline Seat SeatOf(const WeightPlacementManifest& source,
                   const WeightPlacementManifest& target, uint32_t rank,
                   const std::string& instance) {
  Seat s;
  if (rank == 0) {
    s.buffers = Must(internal::AllocateHostBuffers(source, instance));
    s.bindings.sources = s.buffers.bindings;
  } else {
    s.buffers = Must(internal::AllocateHostBuffers(target, instance));
    s.bindings.targets = s.buffers.bindings;
  }
  return s;
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_LIVE_SEATS_H_
