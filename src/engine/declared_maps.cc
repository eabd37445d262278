// Parameter-map fingerprints: what a holder of engine parameters declares
// about them, and the check of a declaration against the map another side
// built (docs/engines.md, "Parameter-map fingerprints").

#include <set>

#include "engine/maps_json.h"
#include "reshard/engine.h"
#include "util/canonical_json.h"
#include "util/dims_text.h"
#include "util/json_reader.h"
#include "util/printable.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using internal::Printable;

// A declaration may name at most this many participants, parameters per
// participant and dimensions per shape: far above any model, so that a
// hostile document cannot make the check allocate without bound.
constexpr size_t kMaxDeclaredParticipants = 1 << 20;
constexpr size_t kMaxDeclaredParameters = 1 << 22;

// "sha256:" + SHA-256 of the canonical JSON of the parameter's pieces (as
// EngineParametersToJson writes them: a fill piece's "fill" included, so
// two fills differ; pieces without one hash as before fills existed).
std::string PiecesId(const EngineParameter& q) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  internal::WritePiecesJson(q.pieces, &w);
  return internal::Sha256Id(out);
}

DeclaredParameter Declare(const EngineParameter& q) {
  return {q.name, q.shape, q.dtype, PiecesId(q)};
}

// "parameters": [{"dtype", "name", "pieces", "shape"}, ...].
void WriteParameters(const std::vector<DeclaredParameter>& params,
                     internal::CanonicalJsonWriter* w) {
  w->Key("parameters");
  w->BeginArray();
  for (const DeclaredParameter& q : params) {
    w->BeginObject();
    w->KeyString("dtype", q.dtype);
    w->KeyString("name", q.name);
    w->KeyString("pieces", q.pieces_id);
    w->Key("shape");
    w->IntArray(q.shape);
    w->EndObject();
  }
  w->EndArray();
}

// The canonical JSON a participant's map id is the hash of.
std::string ParticipantJson(std::string_view engine, std::string_view id,
                            const std::vector<DeclaredParameter>& params) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("engine", engine);
  WriteParameters(params, &w);
  w.KeyString("participant_id", id);
  w.EndObject();
  return out;
}

std::string Describe(const DeclaredParameter& q) {
  return Printable(q.name) + " " + internal::DimsText(q.shape) + " " + q.dtype;
}

// The first difference between the parameters `want` (built here) and
// `got` (declared), as a sentence; empty when they agree.
std::string FirstDifference(const std::vector<DeclaredParameter>& want,
                            const std::vector<DeclaredParameter>& got) {
  const size_t n = std::min(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const DeclaredParameter& a = want[i];
    const DeclaredParameter& b = got[i];
    const std::string at = "parameter " + std::to_string(i) + ": ";
    if (a.name != b.name || a.shape != b.shape || a.dtype != b.dtype) {
      return at + "this side's map has " + Describe(a) + ", the declared has " +
             Describe(b);
    }
    if (a.pieces_id != b.pieces_id) {
      return at + Printable(a.name) + " is filled from other bytes (pieces " +
             a.pieces_id + " here, " + Printable(b.pieces_id) + " declared)";
    }
  }
  if (want.size() > n) {
    return "parameter " + std::to_string(n) + ": this side's map has " +
           Describe(want[n]) + ", the declared map ends after " +
           std::to_string(n) + " parameters";
  }
  if (got.size() > n) {
    return "parameter " + std::to_string(n) + ": the declared map has " +
           Describe(got[n]) + ", this side's map ends after " +
           std::to_string(n) + " parameters";
  }
  return {};
}

Result<DeclaredParameter> ReadDeclaredParameter(
    internal::JsonElement e, const internal::JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto obj, internal::StrictObject::Make(
                                         e, path, "declared parameter",
                                         {"dtype", "name", "pieces", "shape"}));
  DeclaredParameter q;
  RESHARD_ASSIGN_OR_RETURN(q.name, obj.Id("name"));
  RESHARD_ASSIGN_OR_RETURN(q.dtype, obj.Id("dtype"));
  RESHARD_ASSIGN_OR_RETURN(q.pieces_id, obj.Id("pieces"));
  RESHARD_ASSIGN_OR_RETURN(q.shape, obj.IntArray("shape"));
  return q;
}

}  // namespace

std::string DeclaredParameterMapId(std::string_view engine,
                                   const DeclaredParticipantMap& map) {
  return internal::Sha256Id(
      ParticipantJson(engine, map.participant_id, map.parameters));
}

DeclaredParticipantMap DeclareParticipantMap(const EngineLayout& layout,
                                             const EngineParticipant& p) {
  DeclaredParticipantMap out;
  out.participant_id = p.participant_id;
  out.parameters.reserve(p.parameters.size());
  for (const EngineParameter& q : p.parameters) {
    out.parameters.push_back(Declare(q));
  }
  out.parameter_map_id = DeclaredParameterMapId(layout.engine(), out);
  return out;
}

Result<DeclaredParameterMaps> DeclareParameterMaps(
    const EngineLayout& layout, const std::vector<std::string>& participants) {
  DeclaredParameterMaps out;
  out.engine = layout.engine();
  if (participants.empty()) {
    for (const EngineParticipant& p : layout.participants()) {
      out.participants.push_back(DeclareParticipantMap(layout, p));
    }
    return out;
  }
  std::set<std::string, std::less<>> seen;
  for (const std::string& id : participants) {
    const EngineParticipant* p = layout.FindParticipant(id);
    if (p == nullptr) {
      return Status::InvalidArgument(
          "cannot declare the parameter map of " + Printable(id) + ": the " +
          layout.engine() + " layout has no such participant");
    }
    if (!seen.insert(id).second) continue;
    out.participants.push_back(DeclareParticipantMap(layout, *p));
  }
  return out;
}

std::string DeclaredParameterMapsToJson(const DeclaredParameterMaps& maps) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("engine", maps.engine);
  w.Key("participants");
  w.BeginArray();
  for (const DeclaredParticipantMap& p : maps.participants) {
    w.BeginObject();
    w.KeyString("parameter_map_id", p.parameter_map_id);
    WriteParameters(p.parameters, &w);
    w.KeyString("participant_id", p.participant_id);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return out;
}

Result<DeclaredParameterMaps> DeclaredParameterMapsFromJson(
    std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  const internal::JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      internal::StrictObject::Make(doc.root(), root, "declared parameter maps",
                                   {"engine", "participants"}));
  DeclaredParameterMaps out;
  RESHARD_ASSIGN_OR_RETURN(out.engine, obj.Id("engine"));
  RESHARD_ASSIGN_OR_RETURN(auto array, obj.Array("participants"));
  std::set<std::string, std::less<>> seen;
  RESHARD_RETURN_NOT_OK(array.ForEach([&](auto item, const auto& path) {
    if (out.participants.size() >= kMaxDeclaredParticipants) {
      return Status::InvalidArgument(path.ToString() + ": more than " +
                                     std::to_string(kMaxDeclaredParticipants) +
                                     " declared participants");
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto p, internal::StrictObject::Make(
                    item, path, "declared participant",
                    {"parameter_map_id", "parameters", "participant_id"}));
    DeclaredParticipantMap m;
    RESHARD_ASSIGN_OR_RETURN(m.participant_id, p.Id("participant_id"));
    if (!seen.insert(m.participant_id).second) {
      return Status::InvalidArgument(path.ToString() + ": participant " +
                                     Printable(m.participant_id) +
                                     " is declared twice");
    }
    RESHARD_ASSIGN_OR_RETURN(m.parameter_map_id, p.Id("parameter_map_id"));
    RESHARD_ASSIGN_OR_RETURN(auto params, p.Array("parameters"));
    RESHARD_RETURN_NOT_OK(params.ForEach([&](auto e, const auto& pp) {
      if (m.parameters.size() >= kMaxDeclaredParameters) {
        return Status::InvalidArgument(pp.ToString() + ": more than " +
                                       std::to_string(kMaxDeclaredParameters) +
                                       " declared parameters");
      }
      RESHARD_ASSIGN_OR_RETURN(auto q, ReadDeclaredParameter(e, pp));
      m.parameters.push_back(std::move(q));
      return Status::OK();
    }));
    // The id is the hash of what is declared: a document edited by hand
    // (or torn) whose id no longer matches its parameters is refused.
    const std::string id = DeclaredParameterMapId(out.engine, m);
    if (id != m.parameter_map_id) {
      return Status::InvalidArgument(
          path.ToString() + ": the declared parameter_map_id " +
          Printable(m.parameter_map_id) + " of participant " +
          Printable(m.participant_id) + " is not the hash of its parameters (" +
          id + ")");
    }
    out.participants.push_back(std::move(m));
    return Status::OK();
  }));
  return out;
}

Status CheckDeclaredParameterMaps(const EngineLayout& expected,
                                  const DeclaredParameterMaps& declared,
                                  std::string_view who) {
  for (const DeclaredParticipantMap& got : declared.participants) {
    const EngineParticipant* p = expected.FindParticipant(got.participant_id);
    if (p == nullptr) {
      return Status::FailedPrecondition(
          std::string(who) + " declares the parameter map of participant " +
          Printable(got.participant_id) + ", which this side's " +
          expected.engine() + " layout does not have");
    }
    const DeclaredParticipantMap want = DeclareParticipantMap(expected, *p);
    if (want.parameter_map_id == got.parameter_map_id) continue;
    std::string why = FirstDifference(want.parameters, got.parameters);
    if (why.empty()) {
      why = "every parameter agrees, the engine does not";
    }
    return Status::FailedPrecondition(
        "parameter map mismatch for participant " + got.participant_id +
        ": this side built " + expected.engine() + " (parameter map " +
        want.parameter_map_id + "), " + std::string(who) + " declares " +
        Printable(declared.engine) + " (parameter map " +
        Printable(got.parameter_map_id) + "); first difference at " + why);
  }
  return Status::OK();
}

}  // namespace reshard
