// Internal to the live layer: what the other ranks of a session published
// (World) and the helpers every part of a rank's run shares: option
// checks, names for errors, message tags and binding comparisons.
#ifndef RESHARD_LIVE_LIVE_WORLD_H_
#define RESHARD_LIVE_LIVE_WORLD_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "live/session_records.h"
#include "reshard/binding.h"
#include "reshard/live.h"

namespace reshard::live_internal {

// Everything the other ranks published.
struct World {
  std::vector<WeightRuntimeBindingManifest> sources, targets;
  // Participant id -> publishing rank (heterogeneous lookup by view).
  std::map<std::string, uint32_t, std::less<>> source_rank, target_rank;
  std::vector<std::string> addresses;  // by rank
  std::vector<std::string> hosts;      // by rank
  std::vector<uint64_t> incarnations;  // by rank (RankRecord)
};

double Seconds(Clock::time_point since);

std::vector<std::string> ParticipantsOf(
    const std::vector<WeightRuntimeBindingManifest>& bindings);

Status ValidateOptions(const LiveSessionOptions& o);

Result<World> ReadWorld(SessionRecords& s, RecordStore& store,
                        const LiveSessionOptions& o);

std::string RankName(uint32_t rank, const World& w);

std::string HostName();

uint32_t SessionTag(const std::string& session);

Status SameParticipants(const std::vector<WeightRuntimeBindingManifest>& now,
                        const std::vector<WeightRuntimeBindingManifest>& then,
                        std::string_view side);

// Equal physical identity: what the bound plan and the fence depend on.
bool SameBinding(const WeightRuntimeBindingManifest& a,
                 const WeightRuntimeBindingManifest& b);

// Replaces the entries of `world` that belong to participants of `now`.
void Replace(const std::vector<WeightRuntimeBindingManifest>& now,
             std::vector<WeightRuntimeBindingManifest>& world);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_WORLD_H_
