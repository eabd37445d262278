// A reader of the placement wire's "parts" array straight from its bytes,
// for input that is exactly canonical (docs/wire-format.md): keys in the
// order the canonical writer emits them, no whitespace, integers in their
// shortest form, strings escaped exactly as the writer escapes them, aliases,
// fragment ids and participant ids in ascending order.
//
// Why: the placement's identities hash the canonical bytes of its parts.
// When the input bytes are those bytes, they can be hashed as they are,
// and the fragments decoded in one pass without a JSON document; for a
// million fragments that is most of the decoder's time. The reader accepts
// nothing the general decoder would reject or read differently: on any
// byte it does not expect it stops, and the caller decodes the document
// with the general decoder, which also words the errors.

#ifndef RESHARD_CONTRACT_CANONICAL_PARTS_H_
#define RESHARD_CONTRACT_CANONICAL_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/placement.h"

namespace reshard::internal {

// One part as read: its fields and its fragments (each already through
// PlacementFragment::Make), and with TensorIdShares, per fragment the index
// of its tensor.
struct ScannedPart {
  std::string participant_id;
  ParallelRank rank;
  std::vector<PlacementFragment> fragments;
  std::vector<uint32_t> tensors;
};

// The tensors a placement's fragments may name: an index by id, and per
// index the id string that the fragments of that tensor decoded with this
// set share, made at its first use (a million fragments of a thousand
// tensors hold a thousand strings per set, not a million). One set per
// decoding thread, so that threads do not count references on the same
// objects. `ids` has one entry per tensor of `index`.
struct TensorIdShares {
  const std::unordered_map<std::string_view, size_t>* index = nullptr;
  std::vector<std::shared_ptr<const std::string>>* ids = nullptr;

  // The shared id string of tensor `t`, whose id is `id`.
  const std::shared_ptr<const std::string>& Share(size_t t,
                                                  std::string_view id) const {
    std::shared_ptr<const std::string>& shared = (*ids)[t];
    if (shared == nullptr) shared = std::make_shared<const std::string>(id);
    return shared;
  }
};

class CanonicalPartsScanner {
 public:
  // Reads `text` from `at`, which must be the first byte of a part object.
  // With `tensors` (which must outlive the scanner), a fragment must name
  // one of them (else the part is refused and the general decoder words
  // the error) and shares its id.
  CanonicalPartsScanner(std::string_view text, size_t at,
                        const TensorIdShares* tensors = nullptr)
      : p_(text.data() + at),
        end_(text.data() + text.size()),
        tensors_(tensors) {}

  // Reads the part object at the cursor into `out` (its vectors reused);
  // false if its bytes are not canonical or a fragment is invalid. The
  // cursor then stands after the part's closing brace.
  bool ReadPart(ScannedPart* out);

  // Consumes `literal` (a string literal) if the text continues with it.
  // Inline with the length known at compile time, the comparison is a few
  // loads, not a call: a fragment has some twenty of them.
  template <size_t N>
  bool Consume(const char (&literal)[N]) {
    constexpr size_t n = N - 1;
    if (static_cast<size_t>(end_ - p_) < n ||
        std::memcmp(p_, literal, n) != 0) {
      return false;
    }
    p_ += n;
    return true;
  }

  // The cursor's offset from the start of `text`.
  size_t offset(std::string_view text) const { return p_ - text.data(); }

 private:
  bool ReadFragment(PlacementFragmentSpec* s, std::string_view* tensor_id);
  Result<PlacementFragment> MakeFragment(PlacementFragmentSpec* s,
                                         std::string_view tensor_id,
                                         std::vector<uint32_t>* indices);
  bool ReadRank(ParallelRank* r);
  bool ReadString(std::string* out);
  bool ReadStringView(std::string_view* out, std::string* decoded);
  bool ReadInt(int64_t* v);
  bool ReadUInt(uint64_t* v);
  bool ReadIntArray(Dims* out);

  const char* p_;
  const char* end_;
  const TensorIdShares* tensors_;
  std::string_view last_tensor_;  // a key of tensors_->index, or empty
  uint32_t last_index_ = 0;
};

// Offsets of part boundaries that cut the parts array [begin, end) of
// canonical text into about `pieces` runs of equal bytes: each the offset
// of the "," between two parts, ascending, at most pieces - 1 of them (none
// where no boundary is found). Only hints: a reader that starts after one
// must be met exactly there by the reader of the run before it.
std::vector<size_t> FindPartBoundaries(std::string_view text, size_t begin,
                                       size_t end, size_t pieces);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_CANONICAL_PARTS_H_
