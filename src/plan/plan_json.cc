// PlanSummaryToJson: a plan's summary as canonical JSON (the CLI's plan
// --json, Python's plan.to_json()).

#include <functional>
#include <map>
#include <string>

#include "reshard/plan.h"
#include "util/canonical_json.h"

namespace reshard {
namespace {

using internal::CanonicalJsonWriter;

// The document's members by key (canonical JSON wants them sorted): the
// summary's fields (VisitFields) and the plan's own.
using Members =
    std::map<std::string, std::function<void(CanonicalJsonWriter&)>>;

void AddSummary(const PlanSummary& s, Members* members) {
  VisitFields(s, [members](const char* name, uint64_t value) {
    (*members)[name] = [name, value](CanonicalJsonWriter& w) {
      w.KeyUInt(name, value);
    };
  });
}

void Participants(CanonicalJsonWriter& w, const std::vector<std::string>& ids,
                  const std::vector<uint64_t>& bytes) {
  w.BeginArray();
  for (size_t i = 0; i < ids.size(); ++i) {
    w.BeginObject();
    w.KeyUInt("bytes", bytes[i]);
    w.KeyString("participant_id", ids[i]);
    w.EndObject();
  }
  w.EndArray();
}

void PipelineRoutes(CanonicalJsonWriter& w, const LogicalTransferPlan& plan) {
  w.BeginArray();
  for (const auto& r : plan.pipeline_routes()) {
    w.BeginObject();
    w.KeyUInt("bytes", r.bytes);
    w.KeyUInt("operations", r.operations);
    w.KeyInt("source_pp", r.source_pp);
    w.KeyInt("source_stage", r.source_stage);
    w.KeyInt("target_pp", r.target_pp);
    w.KeyInt("target_stage", r.target_stage);
    w.EndObject();
  }
  w.EndArray();
}

void Traffic(CanonicalJsonWriter& w, const LogicalTransferPlan& plan) {
  w.BeginArray();
  for (const auto& e : plan.traffic()) {
    w.BeginObject();
    w.KeyUInt("bytes", e.bytes);
    w.KeyString("source", plan.source_participants()[e.source_participant]);
    w.KeyString("target", plan.target_participants()[e.target_participant]);
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string PlanSummaryToJson(const LogicalTransferPlan& plan) {
  Members members;
  AddSummary(plan.summary(), &members);
  members["pipeline_routes"] = [&](CanonicalJsonWriter& w) {
    w.Key("pipeline_routes");
    PipelineRoutes(w, plan);
  };
  members["source_fragments"] = [&](CanonicalJsonWriter& w) {
    w.KeyUInt("source_fragments", plan.source_fragments().size());
  };
  members["source_participants"] = [&](CanonicalJsonWriter& w) {
    w.Key("source_participants");
    Participants(w, plan.source_participants(), plan.source_bytes());
  };
  members["source_placement_id"] = [&](CanonicalJsonWriter& w) {
    w.KeyString("source_placement_id", plan.source_placement_id());
  };
  members["target_fragments"] = [&](CanonicalJsonWriter& w) {
    w.KeyUInt("target_fragments", plan.target_fragments().size());
  };
  members["target_participants"] = [&](CanonicalJsonWriter& w) {
    w.Key("target_participants");
    Participants(w, plan.target_participants(), plan.target_bytes());
  };
  members["target_placement_id"] = [&](CanonicalJsonWriter& w) {
    w.KeyString("target_placement_id", plan.target_placement_id());
  };
  members["traffic"] = [&](CanonicalJsonWriter& w) {
    w.Key("traffic");
    Traffic(w, plan);
  };
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  for (const auto& [key, write] : members) write(w);
  w.EndObject();
  return out;
}

}  // namespace reshard
