// EngineLayout: parameter maps checked against their placement, bound by
// parameter name, and their JSON form.

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "engine/maps_json.h"
#include "engine/padding.h"
#include "reshard/engine.h"
#include "util/canonical_json.h"
#include "util/dims_text.h"
#include "util/json_reader.h"
#include "util/printable.h"
#include "util/sha256.h"

namespace reshard {

using internal::DimsText;
using internal::Printable;

struct EngineLayout::Impl {
  std::string engine;
  WeightPlacementManifest placement;
  std::vector<EngineParticipant> participants;
};

uint64_t EngineParameter::nbytes() const {
  uint64_t n = static_cast<uint64_t>(itemsize);
  for (int64_t e : shape) n *= static_cast<uint64_t>(e);
  return n;
}

namespace {

std::string Where(const EngineParticipant& p, const EngineParameter& q) {
  return "parameter " + Printable(q.name) + " of participant " +
         Printable(p.participant_id) + ": ";
}

// Shape, dtype and size of one parameter on its own.
Status CheckParameterShape(const EngineParticipant& p,
                           const EngineParameter& q) {
  if (q.name.empty()) {
    return Status::InvalidArgument("participant " +
                                   Printable(p.participant_id) +
                                   " has a parameter without a name");
  }
  const SafetensorsDtype* dt = FindSafetensorsDtypeByPlacement(q.dtype);
  if (dt == nullptr || dt->itemsize != q.itemsize) {
    return Status::InvalidArgument(Where(p, q) + "unknown dtype " +
                                   Printable(q.dtype) + " (itemsize " +
                                   std::to_string(q.itemsize) + ")");
  }
  // A dimension may be 0 (an engine rank without routed experts holds
  // w13_weight of shape [0, ...]): the parameter is 0 bytes, no pieces.
  uint64_t n = static_cast<uint64_t>(q.itemsize);
  for (int64_t e : q.shape) {
    if (e < 0 ||
        (e > 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(e))) {
      return Status::InvalidArgument(Where(p, q) + "shape " +
                                     DimsText(q.shape) +
                                     " is negative or larger than 2^62 bytes");
    }
    n *= static_cast<uint64_t>(e);
    if (n == 0) n = 1;  // a 0 dimension: the bound check stays meaningful
  }
  return Status::OK();
}

// The pieces tile the parameter at whole elements (offsets and sizes
// multiples of the itemsize, which a fragment piece's tensor shares); each
// fragment piece is one of the participant's fragments, of the
// parameter's dtype, used once; a fill is one element, on padding only.
Status CheckPieces(const EngineParticipant& p, const EngineParameter& q,
                   const WeightPlacementManifest& placement,
                   std::unordered_set<std::string>* used) {
  uint64_t at = 0;
  const auto item = static_cast<uint64_t>(q.itemsize);
  for (size_t k = 0; k < q.pieces.size(); ++k) {
    const ParameterPiece& piece = q.pieces[k];
    if (piece.offset != at) {
      return Status::InvalidArgument(
          Where(p, q) +
          (piece.offset > at ? "a gap at bytes [" : "an overlap at bytes [") +
          std::to_string(std::min(at, piece.offset)) + ", " +
          std::to_string(std::max(at, piece.offset)) +
          ") (pieces must tile the parameter in order)");
    }
    if (piece.nbytes == 0 || piece.nbytes > q.nbytes() - at) {
      return Status::InvalidArgument(
          Where(p, q) + "the piece at byte " + std::to_string(at) + " of " +
          std::to_string(piece.nbytes) + " bytes " +
          (piece.nbytes == 0 ? "is empty" : "runs past its end") + " (" +
          std::to_string(q.nbytes()) + " bytes)");
    }
    if (piece.offset % item != 0 || piece.nbytes % item != 0) {
      return Status::InvalidArgument(
          Where(p, q) + "piece " + std::to_string(k) + " (" +
          (piece.padding()
               ? std::string("padding")
               : "fragment " + Printable(piece.placement_fragment_id)) +
          ", " + std::to_string(piece.nbytes) + " bytes at byte " +
          std::to_string(piece.offset) + ") splits " + q.dtype +
          " elements: piece offsets and sizes must be multiples of its " +
          std::to_string(q.itemsize) + "-byte itemsize");
    }
    at += piece.nbytes;
    if (!piece.fill.empty() && piece.fill.size() != item) {
      return Status::InvalidArgument(
          Where(p, q) + "the fill of piece " + std::to_string(k) + " (" +
          std::to_string(piece.nbytes) + " bytes at byte " +
          std::to_string(piece.offset) + ") is " +
          std::to_string(piece.fill.size()) + " bytes, not one " +
          std::to_string(q.itemsize) + "-byte " + q.dtype + " element");
    }
    if (piece.padding()) continue;
    if (!piece.fill.empty()) {
      return Status::InvalidArgument(Where(p, q) + "piece " +
                                     std::to_string(k) + " has both fragment " +
                                     Printable(piece.placement_fragment_id) +
                                     " and a fill (a fill is padding's)");
    }
    const PlacementFragment* f =
        placement.FindFragment(piece.placement_fragment_id);
    const WeightPlacementPart* part = placement.FindPart(p.participant_id);
    if (f == nullptr || part == nullptr || !(f->rank() == part->rank())) {
      return Status::InvalidArgument(Where(p, q) + "fragment " +
                                     Printable(piece.placement_fragment_id) +
                                     " is not a fragment of this participant");
    }
    const TensorDescriptor* t = placement.FindTensor(f->tensor_id());
    if (f->nbytes() != piece.nbytes || t->dtype() != q.dtype) {
      return Status::InvalidArgument(
          Where(p, q) + "fragment " + Printable(piece.placement_fragment_id) +
          " of " + f->tensor_id() + " holds " + std::to_string(f->nbytes()) +
          " bytes of " + t->dtype() + ", but the piece at byte " +
          std::to_string(piece.offset) + " is " + std::to_string(piece.nbytes) +
          " bytes of a " + q.dtype + " parameter");
    }
    if (!used->insert(piece.placement_fragment_id).second) {
      return Status::InvalidArgument(
          Where(p, q) + "fragment " + Printable(piece.placement_fragment_id) +
          " of " + f->tensor_id() + " is in two pieces");
    }
  }
  if (at != q.nbytes()) {
    return Status::InvalidArgument(
        Where(p, q) + "a gap at bytes [" + std::to_string(at) + ", " +
        std::to_string(q.nbytes()) + ") (the pieces end before the " +
        DimsText(q.shape) + " " + q.dtype + " parameter)");
  }
  return Status::OK();
}

Status CheckParticipant(const EngineParticipant& p,
                        const WeightPlacementManifest& placement) {
  const WeightPlacementPart* part = placement.FindPart(p.participant_id);
  if (part == nullptr) {
    return Status::InvalidArgument("parameter map of unknown participant " +
                                   Printable(p.participant_id));
  }
  std::unordered_set<std::string_view> names;
  std::unordered_set<std::string> used;
  for (const EngineParameter& q : p.parameters) {
    RESHARD_RETURN_NOT_OK(CheckParameterShape(p, q));
    if (!names.insert(q.name).second) {
      return Status::InvalidArgument(Where(p, q) + "named twice");
    }
    RESHARD_RETURN_NOT_OK(CheckPieces(p, q, placement, &used));
  }
  for (const PlacementFragment& f : part->fragments()) {
    if (used.count(f.placement_fragment_id()) == 0) {
      return Status::InvalidArgument(
          "participant " + Printable(p.participant_id) + " holds fragment " +
          f.placement_fragment_id() + " of " + f.tensor_id() + " " +
          DimsText(f.global_offset()) + "+" + DimsText(f.local_shape()) +
          " in no parameter");
    }
  }
  return Status::OK();
}

const EngineParticipant& Participant(const EngineLayout& layout,
                                     std::string_view id, Status* st) {
  static const EngineParticipant kNone;
  const EngineParticipant* p = layout.FindParticipant(id);
  if (p == nullptr) {
    *st = Status::InvalidArgument("engine layout " + layout.engine() +
                                  " has no participant " + Printable(id));
    return kNone;
  }
  return *p;
}

// The buffer of every parameter of `p`, checked: present, non-null, of the
// parameter's size; no buffer of another name.
Result<std::vector<const ParameterBuffer*>> MatchBuffers(
    const EngineParticipant& p, const ParameterBuffers& buffers) {
  std::vector<const ParameterBuffer*> out;
  for (const EngineParameter& q : p.parameters) {
    auto it = buffers.find(q.name);
    // A zero-size parameter's buffer may be null (torch's empty tensors).
    if (it == buffers.end() ||
        (it->second.data == nullptr && q.nbytes() != 0)) {
      return Status::InvalidArgument(Where(p, q) + "no buffer given");
    }
    if (it->second.nbytes != q.nbytes()) {
      return Status::InvalidArgument(Where(p, q) + "the buffer holds " +
                                     std::to_string(it->second.nbytes) +
                                     " bytes, the " + DimsText(q.shape) + " " +
                                     q.dtype + " parameter " +
                                     std::to_string(q.nbytes()));
    }
    out.push_back(&it->second);
  }
  if (buffers.size() != out.size()) {
    for (const auto& [name, b] : buffers) {
      bool known = false;
      for (const EngineParameter& q : p.parameters) known |= q.name == name;
      if (!known) {
        return Status::InvalidArgument(
            "participant " + Printable(p.participant_id) +
            " has no parameter " + Printable(name) + " (a buffer was given)");
      }
    }
  }
  return out;
}

}  // namespace

Result<EngineLayout> EngineLayout::Make(
    std::string engine, WeightPlacementManifest placement,
    std::vector<EngineParticipant> participants) {
  std::sort(participants.begin(), participants.end(),
            [](const auto& a, const auto& b) {
              return a.participant_id < b.participant_id;
            });
  for (size_t i = 1; i < participants.size(); ++i) {
    if (participants[i].participant_id == participants[i - 1].participant_id) {
      return Status::InvalidArgument("two parameter maps of participant " +
                                     Printable(participants[i].participant_id));
    }
  }
  for (const EngineParticipant& p : participants) {
    RESHARD_RETURN_NOT_OK(CheckParticipant(p, placement));
  }
  if (participants.size() != placement.parts().size()) {
    for (const WeightPlacementPart& part : placement.parts()) {
      bool found = false;
      for (const auto& p : participants) {
        found |= p.participant_id == part.participant_id();
      }
      if (!found) {
        return Status::InvalidArgument("participant " +
                                       Printable(part.participant_id()) +
                                       " has no parameter map");
      }
    }
  }
  return EngineLayout(std::make_shared<const Impl>(
      Impl{std::move(engine), std::move(placement), std::move(participants)}));
}

const std::string& EngineLayout::engine() const { return impl_->engine; }
const WeightPlacementManifest& EngineLayout::placement() const {
  return impl_->placement;
}
const std::vector<EngineParticipant>& EngineLayout::participants() const {
  return impl_->participants;
}
const EngineParticipant* EngineLayout::FindParticipant(
    std::string_view id) const {
  const auto& ps = impl_->participants;
  auto it =
      std::lower_bound(ps.begin(), ps.end(), id,
                       [](const EngineParticipant& p, std::string_view v) {
                         return p.participant_id < v;
                       });
  return it != ps.end() && it->participant_id == id ? &*it : nullptr;
}

Result<std::map<std::string, void*>> ParameterFragmentBuffers(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers) {
  Status st;
  const EngineParticipant& p = Participant(layout, participant_id, &st);
  RESHARD_RETURN_NOT_OK(st);
  RESHARD_ASSIGN_OR_RETURN(auto matched, MatchBuffers(p, buffers));
  std::map<std::string, void*> out;
  for (size_t i = 0; i < p.parameters.size(); ++i) {
    auto* base = static_cast<char*>(matched[i]->data);
    for (const ParameterPiece& piece : p.parameters[i].pieces) {
      if (!piece.padding()) {
        out.emplace(piece.placement_fragment_id, base + piece.offset);
      }
    }
  }
  return out;
}

Result<CheckedBindings> BindCheckedParameters(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers, const BufferBindingOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      auto fragments,
      ParameterFragmentBuffers(layout, participant_id, buffers));
  return BindCheckedBuffers(layout.placement(), participant_id, fragments,
                            options);
}

Result<WeightRuntimeBindingManifest> BindParameters(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers, const BufferBindingOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings checked,
      BindCheckedParameters(layout, participant_id, buffers, options));
  return checked.bindings().front();
}

Status ZeroParameterPadding(const EngineLayout& layout,
                            std::string_view participant_id,
                            const ParameterBuffers& buffers) {
  Status st;
  const EngineParticipant& p = Participant(layout, participant_id, &st);
  RESHARD_RETURN_NOT_OK(st);
  RESHARD_ASSIGN_OR_RETURN(auto matched, MatchBuffers(p, buffers));
  for (size_t i = 0; i < p.parameters.size(); ++i) {
    for (const ParameterPiece& piece : p.parameters[i].pieces) {
      if (piece.padding()) internal::WritePadding(matched[i]->data, piece);
    }
  }
  return Status::OK();
}

void internal::WritePiecesJson(const std::vector<ParameterPiece>& pieces,
                               internal::CanonicalJsonWriter* w) {
  w->BeginArray();
  for (const ParameterPiece& piece : pieces) {
    w->BeginObject();
    if (!piece.fill.empty()) w->KeyString("fill", internal::HexOf(piece.fill));
    w->Key("fragment");
    if (piece.padding()) {
      w->Null();
    } else {
      w->String(piece.placement_fragment_id);
    }
    w->KeyUInt("nbytes", piece.nbytes);
    w->KeyUInt("offset", piece.offset);
    w->EndObject();
  }
  w->EndArray();
}

namespace {

// The canonical JSON of the maps, with the placement id or without it
// (the maps of a layout whatever its revision and weight generation:
// fragment ids name boxes and ranks only).
std::string ParameterMapsJson(const EngineLayout& layout,
                              bool with_placement_id) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("engine", layout.engine());
  w.Key("participants");
  w.BeginArray();
  for (const EngineParticipant& p : layout.participants()) {
    w.BeginObject();
    w.Key("parameters");
    w.BeginArray();
    for (const EngineParameter& q : p.parameters) {
      w.BeginObject();
      w.KeyString("dtype", q.dtype);
      w.KeyString("name", q.name);
      w.Key("pieces");
      internal::WritePiecesJson(q.pieces, &w);
      w.Key("shape");
      w.IntArray(q.shape);
      w.EndObject();
    }
    w.EndArray();
    w.KeyString("participant_id", p.participant_id);
    w.EndObject();
  }
  w.EndArray();
  if (with_placement_id) {
    w.KeyString("placement_id", layout.placement().placement_id());
  }
  w.EndObject();
  return out;
}

}  // namespace

std::string EngineParametersToJson(const EngineLayout& layout) {
  return ParameterMapsJson(layout, /*with_placement_id=*/true);
}

std::string EngineParameterMapId(const EngineLayout& layout) {
  return internal::Sha256Id(ParameterMapsJson(layout, false));
}

namespace {

Result<ParameterPiece> ReadPiece(internal::JsonElement e,
                                 const internal::JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      internal::StrictObject::Make(e, path, "parameter piece",
                                   {"fragment", "nbytes", "offset"}, {"fill"}));
  ParameterPiece piece;
  RESHARD_ASSIGN_OR_RETURN(piece.offset, obj.U64("offset"));
  RESHARD_ASSIGN_OR_RETURN(piece.nbytes, obj.U64("nbytes"));
  if (!obj.Get("fragment").is_null()) {
    RESHARD_ASSIGN_OR_RETURN(piece.placement_fragment_id, obj.Id("fragment"));
  }
  if (obj.Has("fill")) {
    // Lowercase hex of at least one byte, as EngineParametersToJson writes
    // it (an empty fill is written as no key).
    RESHARD_ASSIGN_OR_RETURN(std::string_view hex, obj.String("fill"));
    auto bytes = internal::BytesOfHex(hex);
    if (!bytes.has_value() || bytes->empty()) {
      return Status::InvalidArgument(
          obj.FieldPath("fill").ToString() + ": \"" + Printable(hex) +
          "\" is not the lowercase hex of an element's bytes");
    }
    piece.fill = std::move(*bytes);
  }
  return piece;
}

Result<EngineParameter> ReadParameter(internal::JsonElement e,
                                      const internal::JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto obj, internal::StrictObject::Make(
                                         e, path, "engine parameter",
                                         {"dtype", "name", "pieces", "shape"}));
  EngineParameter q;
  RESHARD_ASSIGN_OR_RETURN(q.name, obj.Id("name"));
  RESHARD_ASSIGN_OR_RETURN(std::string_view dtype, obj.String("dtype"));
  q.dtype = std::string(dtype);
  const SafetensorsDtype* dt = FindSafetensorsDtypeByPlacement(q.dtype);
  if (dt == nullptr) {
    return Status::InvalidArgument(obj.FieldPath("dtype").ToString() +
                                   ": unknown dtype " + Printable(q.dtype));
  }
  q.itemsize = dt->itemsize;
  RESHARD_ASSIGN_OR_RETURN(q.shape, obj.IntArray("shape"));
  RESHARD_ASSIGN_OR_RETURN(auto pieces, obj.Array("pieces"));
  RESHARD_RETURN_NOT_OK(pieces.ForEach([&](auto item, const auto& p) {
    RESHARD_ASSIGN_OR_RETURN(auto piece, ReadPiece(item, p));
    q.pieces.push_back(std::move(piece));
    return Status::OK();
  }));
  return q;
}

}  // namespace

Result<EngineLayout> EngineParametersFromJson(
    std::string_view json, const WeightPlacementManifest& placement) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  const internal::JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      internal::StrictObject::Make(doc.root(), root, "engine parameter maps",
                                   {"engine", "participants", "placement_id"}));
  RESHARD_ASSIGN_OR_RETURN(std::string engine, obj.Id("engine"));
  RESHARD_ASSIGN_OR_RETURN(std::string_view id, obj.String("placement_id"));
  if (id != placement.placement_id()) {
    return Status::InvalidArgument("the parameter maps are of placement " +
                                   Printable(id) + ", not " +
                                   placement.placement_id());
  }
  std::vector<EngineParticipant> participants;
  RESHARD_ASSIGN_OR_RETURN(auto array, obj.Array("participants"));
  RESHARD_RETURN_NOT_OK(array.ForEach([&](auto item, const auto& path) {
    RESHARD_ASSIGN_OR_RETURN(
        auto p, internal::StrictObject::Make(item, path, "engine participant",
                                             {"parameters", "participant_id"}));
    EngineParticipant out;
    RESHARD_ASSIGN_OR_RETURN(out.participant_id, p.Id("participant_id"));
    RESHARD_ASSIGN_OR_RETURN(auto params, p.Array("parameters"));
    RESHARD_RETURN_NOT_OK(params.ForEach([&](auto e, const auto& pp) {
      RESHARD_ASSIGN_OR_RETURN(auto q, ReadParameter(e, pp));
      out.parameters.push_back(std::move(q));
      return Status::OK();
    }));
    participants.push_back(std::move(out));
    return Status::OK();
  }));
  return EngineLayout::Make(std::move(engine), placement,
                            std::move(participants));
}

}  // namespace reshard
