// CanonicalPartsScanner: the placement wire's parts read from canonical
// bytes (see canonical_parts.h for what it accepts and why).

#include "contract/canonical_parts.h"

#include <algorithm>
#include <cstring>

#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard::internal {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

// The rest of a string whose opening quote was consumed, at least one
// byte, then the closing quote. Printable ASCII other than '"' and '\\' is
// copied as it is; a string with escapes is decoded by the JSON reader and
// must be exactly what the canonical writer makes of the decoded text (so
// "\u00e9" is read, "\u00E9" and a raw "\xc3\xa9" are not).
bool CanonicalPartsScanner::ReadString(std::string* out) {
  std::string_view view;
  if (!ReadStringView(&view, out)) return false;
  if (view.data() != out->data()) out->assign(view);
  return true;
}

// ReadString's string as a view: of the text itself when the string has no
// escapes, else of `*decoded`, which then holds it.
bool CanonicalPartsScanner::ReadStringView(std::string_view* out,
                                           std::string* decoded) {
  const char* q = p_;
  bool escaped = false;
  for (; q < end_ && *q != '"'; ++q) {
    const auto c = static_cast<unsigned char>(*q);
    if (c == '\\') {
      escaped = true;
      if (++q == end_) return false;  // the escaped byte is skipped
    } else if (c < 0x20 || c > 0x7E) {
      return false;
    }
  }
  if (q == end_ || q == p_) return false;
  if (escaped) {
    const std::string_view token(p_ - 1, q - p_ + 2);  // with its quotes
    auto doc = JsonDocument::Parse(token);
    if (!doc.ok() || !doc->root().is_string()) return false;
    const std::string_view text(doc->root());
    std::string canonical;
    AppendJsonString(text, JsonAscii::kEscapeNonAscii, &canonical);
    if (text.empty() || canonical != token) return false;
    decoded->assign(text);
    *out = *decoded;
  } else {
    *out = std::string_view(p_, q - p_);
  }
  p_ = q + 1;
  return true;
}

// A signed integer in its shortest form ("0", "-7", never "-0" or "007")
// that fits in 64 bits.
bool CanonicalPartsScanner::ReadInt(int64_t* v) {
  const bool negative = p_ < end_ && *p_ == '-';
  if (negative) ++p_;
  uint64_t magnitude = 0;
  if (!ReadUInt(&magnitude)) return false;
  if (negative) {
    if (magnitude == 0 || magnitude > uint64_t{1} << 63) return false;
    *v = static_cast<int64_t>(0 - magnitude);
  } else {
    if (magnitude > uint64_t{INT64_MAX}) return false;
    *v = static_cast<int64_t>(magnitude);
  }
  return true;
}

// An unsigned integer in its shortest form that fits in 64 bits.
bool CanonicalPartsScanner::ReadUInt(uint64_t* v) {
  if (p_ == end_ || !IsDigit(*p_)) return false;
  if (*p_ == '0') {
    ++p_;
    *v = 0;
    return p_ == end_ || !IsDigit(*p_);
  }
  uint64_t acc = 0;
  for (; p_ < end_ && IsDigit(*p_); ++p_) {
    if (__builtin_mul_overflow(acc, 10, &acc) ||
        __builtin_add_overflow(acc, static_cast<uint64_t>(*p_ - '0'), &acc)) {
      return false;
    }
  }
  *v = acc;
  return true;
}

bool CanonicalPartsScanner::ReadIntArray(Dims* out) {
  out->clear();
  if (!Consume("[")) return false;
  if (Consume("]")) return true;
  do {
    int64_t v = 0;
    if (!ReadInt(&v)) return false;
    out->push_back(v);
  } while (Consume(","));
  return Consume("]");
}

bool CanonicalPartsScanner::ReadRank(ParallelRank* r) {
  // Rank coordinates are >= 0 (the general reader's rule).
  uint64_t v[4];
  if (!Consume("{\"dp\":") || !ReadUInt(&v[0]) || !Consume(",\"ep\":") ||
      !ReadUInt(&v[1]) || !Consume(",\"pp\":") || !ReadUInt(&v[2]) ||
      !Consume(",\"tp\":") || !ReadUInt(&v[3]) || !Consume("}")) {
    return false;
  }
  for (uint64_t x : v) {
    if (x > uint64_t{INT64_MAX}) return false;
  }
  r->dp = static_cast<int64_t>(v[0]);
  r->ep = static_cast<int64_t>(v[1]);
  r->pp = static_cast<int64_t>(v[2]);
  r->tp = static_cast<int64_t>(v[3]);
  return true;
}

bool CanonicalPartsScanner::ReadFragment(PlacementFragmentSpec* s,
                                         std::string_view* tensor_id) {
  if (!Consume("{\"aliases\":[")) return false;
  if (!Consume("]")) {
    do {
      std::string alias;
      if (!Consume("\"") || !ReadString(&alias)) return false;
      // Ascending, as PlacementFragment::Make keeps them.
      if (!s->aliases.empty() && !(s->aliases.back() < alias)) return false;
      s->aliases.push_back(std::move(alias));
    } while (Consume(","));
    if (!Consume("]")) return false;
  }
  if (!Consume(",\"global_offset\":") || !ReadIntArray(&s->global_offset) ||
      !Consume(",\"local_shape\":") || !ReadIntArray(&s->local_shape) ||
      !Consume(",\"nbytes\":") || !ReadUInt(&s->nbytes)) {
    return false;
  }
  if (Consume(",\"pipeline_stage_id\":")) {
    int64_t stage = 0;
    if (!ReadInt(&stage)) return false;
    s->pipeline_stage_id = stage;
  }
  return Consume(",\"placement_fragment_id\":\"") &&
         ReadString(&s->placement_fragment_id.emplace()) &&
         Consume(",\"rank\":") && ReadRank(&s->rank) &&
         Consume(",\"tensor_id\":\"") &&
         ReadStringView(tensor_id, &s->tensor_id) && Consume("}");
}

// The fragment read into `s`, its tensor id `tensor_id` (a view of the text
// or of s->tensor_id): shared from tensors_ when the scanner has them (and
// its table index appended to `indices`), else copied.
Result<PlacementFragment> CanonicalPartsScanner::MakeFragment(
    PlacementFragmentSpec* s, std::string_view tensor_id,
    std::vector<uint32_t>* indices) {
  if (tensors_ == nullptr) {
    if (tensor_id.data() != s->tensor_id.data()) s->tensor_id.assign(tensor_id);
    return PlacementFragment::Make(std::move(*s));
  }
  // Fragments of one tensor often follow each other: the last one's
  // tensor is compared before the index is searched.
  if (tensor_id != last_tensor_) {
    const auto it = tensors_->index->find(tensor_id);
    if (it == tensors_->index->end()) {
      // The caller only sees the refusal; the general decoder words it.
      return Status::InvalidArgument("unknown tensor");
    }
    last_tensor_ = it->first;
    last_index_ = static_cast<uint32_t>(it->second);
  }
  indices->push_back(last_index_);
  return MakeFragmentSharingTensorId(
      std::move(*s), tensors_->Share(last_index_, last_tensor_));
}

bool CanonicalPartsScanner::ReadPart(ScannedPart* out) {
  out->fragments.clear();
  out->tensors.clear();
  if (!Consume("{\"fragments\":[")) return false;
  if (!Consume("]")) {
    do {
      PlacementFragmentSpec s;
      std::string_view tensor_id;
      if (!ReadFragment(&s, &tensor_id)) return false;
      Result<PlacementFragment> f = MakeFragment(&s, tensor_id, &out->tensors);
      if (!f.ok()) return false;
      // Ascending ids: the order WeightPlacementPart::Make keeps.
      if (!out->fragments.empty() &&
          !(out->fragments.back().placement_fragment_id() <
            f->placement_fragment_id())) {
        return false;
      }
      out->fragments.push_back(std::move(f).ValueOrDie());
    } while (Consume(","));
    if (!Consume("]")) return false;
  }
  return Consume(",\"participant_id\":\"") &&
         ReadString(&out->participant_id) && Consume(",\"rank\":") &&
         ReadRank(&out->rank) && Consume("}");
}

std::vector<size_t> FindPartBoundaries(std::string_view text, size_t begin,
                                       size_t end, size_t pieces) {
  // A part ends with its rank object; a quote cannot occur inside a
  // canonical string here, so this pattern only matches between parts in
  // text the readers accept (and the readers check that it does).
  constexpr std::string_view kBetweenParts = "}},{\"fragments\":[";
  std::vector<size_t> out;
  for (size_t i = 1; i < pieces && begin < end; ++i) {
    size_t from = begin + (end - begin) / pieces * i;
    if (!out.empty()) from = std::max(from, out.back() + 1);
    const size_t at = text.find(kBetweenParts, from);
    if (at == std::string_view::npos || at + kBetweenParts.size() > end) break;
    out.push_back(at + 2);
  }
  return out;
}

}  // namespace reshard::internal
