// The JSON record of one placement part ("weight-placement-part"): the
// part's header, ids and rank, and its tensors and fragments in the
// placement wire's forms, written and read by the placement codec
// (contract/placement_codec.h).

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/placement_codec.h"
#include "reshard/placement.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"
#include "util/printable.h"

namespace reshard {

using internal::CanonicalJsonWriter;
using internal::JsonArray;
using internal::JsonDocument;
using internal::JsonElement;
using internal::JsonPath;

namespace {

// The record's fields in the order they are named when missing.
constexpr std::string_view kPartFields[] = {
    "record",           "resource_id", "revision",       "weight_generation",
    "placement_set_id", "topology_id", "participant_id", "rank",
    "tensors",          "fragments"};

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The record's exact field set, with the framework helpers' words:
// "part must be an object, got list", "part lacks field(s) rank",
// "part has unknown field(s) extra".
Status CheckPartFields(JsonElement e) {
  using Type = simdjson::dom::element_type;
  if (e.type() != Type::OBJECT) {
    const char* got = e.type() == Type::ARRAY        ? "list"
                      : e.type() == Type::STRING     ? "str"
                      : e.type() == Type::BOOL       ? "bool"
                      : e.type() == Type::DOUBLE     ? "float"
                      : e.type() == Type::NULL_VALUE ? "NoneType"
                                                     : "int";
    return Status::InvalidArgument(std::string("part must be an object, got ") +
                                   got);
  }
  std::vector<std::string> missing, unknown;
  simdjson::dom::object obj(e);
  for (std::string_view k : kPartFields) {
    if (obj.at_key(k).error() != simdjson::SUCCESS) missing.emplace_back(k);
  }
  for (auto field : obj) {
    if (std::find(std::begin(kPartFields), std::end(kPartFields), field.key) ==
        std::end(kPartFields)) {
      unknown.push_back(internal::Printable(field.key));
    }
  }
  std::sort(unknown.begin(), unknown.end());
  if (!missing.empty()) {
    return Status::InvalidArgument("part lacks field(s) " + Joined(missing));
  }
  if (!unknown.empty()) {
    return Status::InvalidArgument("part has unknown field(s) " +
                                   Joined(unknown));
  }
  return Status::OK();
}

// The record's fields other than its tensors and fragments.
Status ReadPartHeader(const internal::StrictObject& obj,
                      WeightPlacementPartSpec* s) {
  auto record = obj.Get("record");
  if (record.type() != simdjson::dom::element_type::STRING ||
      std::string_view(record) != kPlacementPartRecord) {
    std::string got =
        record.type() == simdjson::dom::element_type::STRING
            ? "'" + internal::Printable(std::string_view(record)) + "'"
            : simdjson::minify(record);
    return Status::InvalidArgument("part.record must be '" +
                                   std::string(kPlacementPartRecord) +
                                   "', got " + got);
  }
  RESHARD_ASSIGN_OR_RETURN(s->header.resource_id, obj.Id("resource_id"));
  RESHARD_ASSIGN_OR_RETURN(s->header.revision, obj.Id("revision"));
  RESHARD_ASSIGN_OR_RETURN(s->header.weight_generation,
                           obj.U64("weight_generation"));
  RESHARD_ASSIGN_OR_RETURN(s->header.placement_set_id,
                           obj.Id("placement_set_id"));
  RESHARD_ASSIGN_OR_RETURN(s->topology_id, obj.Id("topology_id"));
  RESHARD_ASSIGN_OR_RETURN(s->participant_id, obj.Id("participant_id"));
  RESHARD_ASSIGN_OR_RETURN(s->rank, obj.Decode("rank", internal::ReadRank));
  return Status::OK();
}

Result<WeightPlacementPart> ReadPart(JsonElement e, const JsonPath& path) {
  RESHARD_RETURN_NOT_OK(CheckPartFields(e));
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, internal::StrictObject::Make(
                    e, path, "placement part",
                    {"fragments", "participant_id", "placement_set_id", "rank",
                     "record", "resource_id", "revision", "tensors",
                     "topology_id", "weight_generation"}));
  WeightPlacementPartSpec s;
  RESHARD_RETURN_NOT_OK(ReadPartHeader(obj, &s));
  RESHARD_ASSIGN_OR_RETURN(JsonArray tensors, obj.Array("tensors"));
  RESHARD_RETURN_NOT_OK(tensors.ForEach(
      [&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto t, internal::ReadTensor(item, item_path));
        s.tensors.push_back(std::move(t));
        return Status::OK();
      }));
  RESHARD_ASSIGN_OR_RETURN(JsonArray fragments, obj.Array("fragments"));
  RESHARD_RETURN_NOT_OK(fragments.ForEach(
      [&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto f,
                                 internal::ReadFragment(item, item_path));
        s.fragments.push_back(std::move(f));
        return Status::OK();
      }));
  return WeightPlacementPart::Make(std::move(s));
}

}  // namespace

std::string WeightPlacementPartToJson(const WeightPlacementPart& part) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("fragments");
  w.BeginArray();
  for (const auto& f : part.fragments()) internal::WriteFragment(f, &w);
  w.EndArray();
  w.KeyString("participant_id", part.participant_id());
  w.KeyString("placement_set_id", part.header().placement_set_id);
  w.Key("rank");
  internal::WriteRank(part.rank(), &w);
  w.KeyString("record", kPlacementPartRecord);
  w.KeyString("resource_id", part.header().resource_id);
  w.KeyString("revision", part.header().revision);
  w.Key("tensors");
  w.BeginArray();
  for (const auto& t : part.tensors()) internal::WriteTensor(t, &w);
  w.EndArray();
  w.KeyString("topology_id", part.topology_id());
  w.KeyUInt("weight_generation", part.header().weight_generation);
  w.EndObject();
  return out;
}

Result<WeightPlacementPart> WeightPlacementPartFromJson(std::string_view json) {
  auto doc = JsonDocument::Parse(json);
  if (!doc.ok()) {
    const std::string& why = doc.status().message();
    if (why.rfind("invalid JSON: ", 0) != 0) return doc.status();
    return Status::InvalidArgument("not JSON (" + why + ")");
  }
  const JsonPath root;
  const JsonPath path = root.Field("part");
  RESHARD_ASSIGN_OR_RETURN(auto part, ReadPart(doc->root(), path));
  // A part is canonical: its own JSON must be what was read (sorted
  // tensors and fragments, normalised aliases, no null stage ids).
  RESHARD_ASSIGN_OR_RETURN(
      std::string canonical,
      internal::CanonicalizeJsonText(json, JsonAscii::kEscapeNonAscii));
  if (WeightPlacementPartToJson(part) != canonical) {
    return Status::InvalidArgument(
        "part is not in canonical form (tensors, fragments or aliases out of "
        "order)");
  }
  return part;
}

}  // namespace reshard
