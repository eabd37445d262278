// RunLiveReshard: rendezvous, plan, bind, fence, exchange, completion
// barrier (see include/reshard/live.h for the lifecycle); AbortLiveSession
// and OpenRendezvous.
#include <string>

#include "live/live_conversion.h"
#include "live/live_rank.h"
#include "reshard/live.h"
#include "reshard/sdk/backend_registry.h"

namespace reshard {

using live_internal::LiveRank;
using live_internal::ValidateOptions;

LiveBindings LiveBindings::Of(CheckedBindings sources,
                              CheckedBindings targets) {
  LiveBindings out{sources.bindings(), targets.bindings(), std::nullopt,
                   std::nullopt};
  out.checked_sources = std::move(sources);
  out.checked_targets = std::move(targets);
  return out;
}

Result<LiveReport> RunLiveReshard(RecordStore& store,
                                  const WeightPlacementManifest& source,
                                  const WeightPlacementManifest& target,
                                  const LiveBindings& bindings,
                                  const LiveSessionOptions& options) {
  RESHARD_RETURN_NOT_OK(ValidateOptions(options));
  auto made = live_internal::MakeLiveWire(source, target, bindings, options);
  if (!made.ok()) {
    // Refused before publishing: the others stop at once, naming this rank.
    (void)AbortLiveSession(store, options.session, options.rank, made.status());
    return made.status();
  }
  auto wire = std::move(made).ValueOrDie();
  LiveRank rank(store, wire->wire_source(), wire->wire_target(), wire->bindings,
                wire->options);
  RESHARD_RETURN_NOT_OK(rank.RefuseRejoin());
  // Every failure from here on is recorded for the other ranks.
  const live_internal::LiveConversion* conversion = wire->conversion.get();
  Status st = conversion == nullptr ? Status::OK()
                                    : conversion->Quantize(wire->threads);
  if (st.ok()) st = rank.Run();
  if (!st.ok()) return rank.Abort(std::move(st));
  LiveReport report = rank.report();
  if (conversion != nullptr) {
    report.convert_seconds =
        conversion->quantize_seconds() + conversion->apply_seconds();
  }
  return report;
}

Status AbortLiveSession(RecordStore& rendezvous, std::string_view session,
                        uint32_t rank, const Status& reason) {
  const std::string key =
      std::string(session) + "/abort/" + std::to_string(rank);
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
  const Status put = rendezvous.Put(
      key, internal::EncodeAbortRecord(rank, reason.ToString(), 0,
                                       /*final=*/true));
  return put.IsAlreadyExists() ? Status::OK() : put;
}

Result<std::unique_ptr<RecordStore>> OpenRendezvous(std::string_view uri) {
  RESHARD_ASSIGN_OR_RETURN(const StoreBackend* backend,
                           FindStoreBackend(uri, BackendRole::kRendezvous));
  return backend->open_rendezvous(uri);
}

}  // namespace reshard
