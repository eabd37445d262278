// Strict decoder of the canonical placement wire (docs/wire-format.md): the
// document's header, its tensors, then its parts (on two threads for large
// documents), then the global rules of WeightPlacementManifest::Make.

#include "contract/placement_wire.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "contract/canonical_parts.h"
#include "contract/placement_codec.h"
#include "reshard/placement.h"
#include "util/claimed_runs.h"
#include "util/json_reader.h"
#include "util/sha256.h"

namespace reshard {
namespace internal {
namespace {

// Documents at least this large decode their parts on two threads.
constexpr size_t kParallelDecodeBytes = 4 << 20;
// Runs of parts a large canonical document is cut into for its two
// threads: enough that the faster thread takes up the slower one's slack.
constexpr size_t kScanRuns = 16;

// The placement's tensors sorted by tensor_id, with an index by id.
struct TensorTable {
  std::vector<TensorDescriptor> tensors;
  std::unordered_map<std::string_view, size_t> index;
};

// The fields shared by every part: resource_kind, resource_id, revision,
// weight_generation, placement_set_id.
Result<PlacementHeader> ReadHeader(const StrictObject& obj) {
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind, obj.String("resource_kind"));
  if (kind != WeightPlacementManifest::kResourceKind) {
    return Status::InvalidArgument(
        "placement manifest resource_kind must be model_weight, got \"" +
        std::string(kind) + "\"");
  }
  PlacementHeader header;
  RESHARD_ASSIGN_OR_RETURN(header.resource_id, obj.Id("resource_id"));
  RESHARD_ASSIGN_OR_RETURN(header.revision, obj.Id("revision"));
  RESHARD_ASSIGN_OR_RETURN(header.weight_generation,
                           obj.U64("weight_generation"));
  RESHARD_ASSIGN_OR_RETURN(header.placement_set_id, obj.Id("placement_set_id"));
  return header;
}

// Reads the tensor descriptors, sorts them and rejects duplicate ids.
Result<TensorTable> ReadTensorTable(const StrictObject& obj) {
  RESHARD_ASSIGN_OR_RETURN(JsonArray arr, obj.Array("tensors"));
  TensorTable table;
  std::vector<TensorDescriptor>& tensors = table.tensors;
  tensors.reserve(arr.size());
  RESHARD_RETURN_NOT_OK(
      arr.ForEach([&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto t, ReadTensor(item, item_path));
        tensors.push_back(std::move(t));
        return Status::OK();
      }));
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.tensor_id() < b.tensor_id();
  });
  for (size_t k = 1; k < tensors.size(); ++k) {
    if (tensors[k].tensor_id() == tensors[k - 1].tensor_id()) {
      return Status::InvalidArgument("tensors: duplicate tensor_id: " +
                                     tensors[k].tensor_id());
    }
  }
  table.index.reserve(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    table.index.emplace(tensors[k].tensor_id(), k);
  }
  return table;
}

// Per fragment, the index in `table` of its tensor, for a decoder that
// looked the ids up: `table_index`, and `part_index` (scratch of the
// table's size) for mapping them to the part's own tensors.
struct FragmentTensors {
  std::vector<uint32_t> table_index;
  std::vector<uint32_t> part_index;
};

// A part from its decoded fields and fragments: the tensors its fragments
// name (their indices in `table`, in `part_tensors`), then the part's
// rules. `fragment_tensors`, if given, tells the part its fragments'
// tensors without their ids being looked up again.
Result<WeightPlacementPart> AssemblePart(
    WeightPlacementPartSpec ps, const TensorTable& table,
    std::vector<size_t>* part_tensors,
    FragmentTensors* fragment_tensors = nullptr) {
  std::sort(part_tensors->begin(), part_tensors->end());
  part_tensors->erase(std::unique(part_tensors->begin(), part_tensors->end()),
                      part_tensors->end());
  ps.tensors.reserve(part_tensors->size());
  for (size_t t : *part_tensors) ps.tensors.push_back(table.tensors[t]);
  std::vector<uint32_t> hint;
  if (fragment_tensors != nullptr) {
    std::vector<uint32_t>& part_index = fragment_tensors->part_index;
    part_index.resize(table.tensors.size());
    for (size_t j = 0; j < part_tensors->size(); ++j) {
      part_index[(*part_tensors)[j]] = static_cast<uint32_t>(j);
    }
    hint.reserve(fragment_tensors->table_index.size());
    for (uint32_t t : fragment_tensors->table_index) {
      hint.push_back(part_index[t]);
    }
  }
  return WeightPlacementPart::Make(std::move(ps), std::move(hint));
}

// Decodes one part; its fragments must name known tensors, which are marked
// in `referenced`, and share their ids from `shares` (the calling thread's).
// `part_tensors` is scratch space.
Result<WeightPlacementPart> DecodePart(JsonElement item, const JsonPath& ip,
                                       const PlacementHeader& header,
                                       const std::string& topology_id,
                                       const TensorTable& table,
                                       const TensorIdShares& shares,
                                       std::vector<size_t>* part_tensors,
                                       std::vector<uint8_t>* referenced) {
  RESHARD_ASSIGN_OR_RETURN(
      auto po, StrictObject::Make(item, ip, "placement part",
                                  {"fragments", "participant_id", "rank"}));
  WeightPlacementPartSpec ps;
  ps.header = header;
  ps.topology_id = topology_id;
  RESHARD_ASSIGN_OR_RETURN(ps.participant_id, po.Id("participant_id"));
  RESHARD_ASSIGN_OR_RETURN(ps.rank, po.Decode("rank", ReadRank));
  RESHARD_ASSIGN_OR_RETURN(JsonArray frag_arr, po.Array("fragments"));
  ps.fragments.reserve(frag_arr.size());
  part_tensors->clear();
  RESHARD_RETURN_NOT_OK(frag_arr.ForEach([&](JsonElement fe,
                                             const JsonPath& fpk) -> Status {
    RESHARD_ASSIGN_OR_RETURN(
        auto f, ReadFragment(fe, fpk, [&](std::string_view id) {
          auto it = table.index.find(id);
          return it == table.index.end() ? nullptr
                                         : shares.Share(it->second, it->first);
        }));
    auto it = table.index.find(f.tensor_id());
    if (it == table.index.end()) {
      return Status::InvalidArgument(
          fpk.ToString() +
          ": placement part references an unknown tensor: " + f.tensor_id());
    }
    part_tensors->push_back(it->second);
    (*referenced)[it->second] = 1;
    ps.fragments.push_back(std::move(f));
    return Status::OK();
  }));
  auto part = AssemblePart(std::move(ps), table, part_tensors);
  if (!part.ok()) return part.status().WithContext(ip.ToString());
  return part;
}

// Decodes every part (independent of each other: documents of
// kParallelDecodeBytes or more use two threads) and checks that every tensor
// is referenced by some fragment.
Result<std::vector<WeightPlacementPart>> DecodeParts(
    const JsonArray& parts, const PlacementHeader& header,
    const std::string& topology_id, const TensorTable& table,
    size_t document_bytes) {
  std::vector<JsonElement> items(parts.begin(), parts.end());
  std::vector<std::optional<Result<WeightPlacementPart>>> decoded(items.size());
  // Decodes parts [begin, end) and marks the tensors they reference.
  auto decode = [&](size_t begin, size_t end, std::vector<uint8_t>* seen) {
    std::vector<size_t> part_tensors;
    std::vector<std::shared_ptr<const std::string>> ids(table.tensors.size());
    const TensorIdShares shares{&table.index, &ids};
    for (size_t p = begin; p < end; ++p) {
      decoded[p] = DecodePart(items[p], parts.path().Index(p), header,
                              topology_id, table, shares, &part_tensors, seen);
      if (!decoded[p]->ok()) return;  // later parts are not needed
    }
  };
  const size_t n_tensors = table.tensors.size();
  std::vector<uint8_t> referenced(n_tensors, 0);
  if (document_bytes >= kParallelDecodeBytes && items.size() >= 2) {
    std::vector<uint8_t> referenced2(n_tensors, 0);
    const size_t mid = items.size() / 2;
    std::thread worker(decode, mid, items.size(), &referenced2);
    decode(0, mid, &referenced);
    worker.join();
    for (size_t k = 0; k < n_tensors; ++k) referenced[k] |= referenced2[k];
  } else {
    decode(0, items.size(), &referenced);
  }
  std::vector<WeightPlacementPart> out;
  out.reserve(items.size());
  for (auto& part : decoded) {
    if (!part.has_value()) continue;  // skipped after an earlier error
    if (!part->ok()) return part->status();
    out.push_back(std::move(*part).ValueOrDie());
  }
  for (size_t k = 0; k < n_tensors; ++k) {
    if (!referenced[k]) {
      return Status::InvalidArgument(
          "placement JSON contains an unreferenced tensor: " +
          table.tensors[k].tensor_id());
    }
  }
  return out;
}

// --- Canonical input (contract/canonical_parts.h) ------------------------

// The document's fields after its parts.
struct WireTailFields {
  PlacementHeader header;
  std::string placement_id;
  std::optional<ParallelTopology> topology;
  TensorTable table;
};

// Reads `tail` = ,"placement_id":..} (the text after the parts array) as
// an object of its own, with the general readers.
Result<WireTailFields> ReadWireTail(std::string_view tail) {
  std::string text = "{";
  text.append(tail.substr(1));
  RESHARD_ASSIGN_OR_RETURN(JsonDocument doc, JsonDocument::Parse(text));
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(
          doc.root(), JsonPath(), "placement manifest",
          {"placement_id", "placement_set_id", "resource_id", "resource_kind",
           "revision", "tensors", "topology", "weight_generation"}));
  WireTailFields out;
  RESHARD_ASSIGN_OR_RETURN(out.header, ReadHeader(obj));
  RESHARD_ASSIGN_OR_RETURN(out.placement_id, obj.Id("placement_id"));
  RESHARD_ASSIGN_OR_RETURN(out.topology, obj.Decode("topology", ReadTopology));
  RESHARD_ASSIGN_OR_RETURN(out.table, ReadTensorTable(obj));
  return out;
}

// The parts one thread reads, and the tensors they reference.
struct ScannedRange {
  std::vector<WeightPlacementPart> parts;
  std::vector<uint8_t> referenced;
};

// For a caller that owns the text and drops it once decoded: hashes the
// wire's prefix [0, prefix_end) on a thread of its own while the parts are
// scanned, and gives back to the system the pages of each scanned run of
// parts once the hash has passed it (madvise: they then read as zeros). The
// text's peak is then a few runs, not the whole document, beside the
// decoded fragments.
class PrefixReleaser {
 public:
  PrefixReleaser(std::string_view json, size_t prefix_end)
      : json_(json), prefix_end_(prefix_end) {}
  ~PrefixReleaser() { Stop(); }

  // The runs [begin, stop) the parts are scanned in; then hashing starts.
  void Start(std::vector<std::pair<size_t, size_t>> runs) {
    runs_ = std::move(runs);
    done_.assign(runs_.size(), 0);
    hasher_ = std::thread([this] { Hash(); });
  }
  // Run `r` has been scanned: its bytes are not read again.
  void RunDone(size_t r) {
    std::lock_guard<std::mutex> lock(mu_);
    done_[r] = 1;
    ReleaseLocked();
  }
  // Joins the hasher and returns it, or nullopt if stopped early.
  std::optional<Sha256> Finish() {
    if (hasher_.joinable()) hasher_.join();
    if (hashed_.load() != prefix_end_) return std::nullopt;
    return std::move(hash_);
  }
  // Stops hashing (after a failed scan) and joins.
  void Stop() {
    stop_ = true;
    if (hasher_.joinable()) hasher_.join();
  }
  // Whether any page was given back (the text is no longer intact).
  bool released() const { return released_.load(); }

 private:
  static constexpr size_t kHashStep = size_t{4} << 20;

  void Hash() {
    for (size_t at = 0; at < prefix_end_ && !stop_;) {
      const size_t n = std::min(kHashStep, prefix_end_ - at);
      hash_.Update(json_.substr(at, n));
      at += n;
      hashed_.store(at);
      std::lock_guard<std::mutex> lock(mu_);
      ReleaseLocked();
    }
  }
  // Gives back the whole pages of every scanned run the hash has passed.
  void ReleaseLocked() {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const size_t hashed = hashed_.load();
    for (size_t r = 0; r < runs_.size(); ++r) {
      if (done_[r] != 1 || runs_[r].second > hashed) continue;
      done_[r] = 2;
      const uintptr_t base = reinterpret_cast<uintptr_t>(json_.data());
      const uintptr_t first = (base + runs_[r].first + page - 1) & ~(page - 1);
      const uintptr_t last = (base + runs_[r].second) & ~(page - 1);
      if (last > first && ::madvise(reinterpret_cast<void*>(first),
                                    last - first, MADV_DONTNEED) == 0) {
        released_ = true;
      }
    }
  }

  const std::string_view json_;
  const size_t prefix_end_;
  std::vector<std::pair<size_t, size_t>> runs_;
  std::mutex mu_;
  std::vector<uint8_t> done_;  // per run: 0 scanning, 1 scanned, 2 given back
  std::atomic<size_t> hashed_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> released_{false};
  Sha256 hash_;
  std::thread hasher_;
};

// Reads and assembles the canonical parts from offset `begin` of `json`
// until the cursor stands exactly at `stop` after a part; false if the
// bytes are not canonical or a part breaks a rule.
bool ScanParts(std::string_view json, size_t begin, size_t stop,
               const WireTailFields& fields, ScannedRange* out) {
  const TensorTable& table = fields.table;
  out->referenced.assign(table.tensors.size(), 0);
  std::vector<std::shared_ptr<const std::string>> ids(table.tensors.size());
  const TensorIdShares tensors{&table.index, &ids};
  CanonicalPartsScanner scanner(json, begin, &tensors);
  ScannedPart scanned;
  std::vector<size_t> part_tensors;
  FragmentTensors fragment_tensors;
  while (true) {
    // Parts of one placement are alike in size: the last one's count saves
    // growing this one's vector (each growth copies every fragment).
    scanned.fragments.reserve(
        out->parts.empty() ? 0 : out->parts.back().fragments().size());
    if (!scanner.ReadPart(&scanned)) return false;
    part_tensors.clear();
    uint32_t last = UINT32_MAX;  // fragments of one tensor often follow
    for (uint32_t t : scanned.tensors) {
      if (t != last) {
        part_tensors.push_back(t);
        out->referenced[t] = 1;
        last = t;
      }
    }
    std::swap(fragment_tensors.table_index, scanned.tensors);
    WeightPlacementPartSpec ps;
    ps.header = fields.header;
    ps.topology_id = fields.topology->topology_id();
    ps.participant_id = std::move(scanned.participant_id);
    ps.rank = scanned.rank;
    ps.fragments = std::move(scanned.fragments);
    auto part =
        AssemblePart(std::move(ps), table, &part_tensors, &fragment_tensors);
    if (!part.ok()) return false;
    out->parts.push_back(std::move(part).ValueOrDie());
    const size_t at = scanner.offset(json);
    if (at == stop) return true;
    if (at > stop || !scanner.Consume(",")) return false;
  }
}

// Reads the parts array [first, end) of `json` into `runs`, one per run of
// parts between the boundaries FindPartBoundaries suggests. Large documents
// are cut into kScanRuns runs that two threads claim in turn, so a thread
// slowed by page faults or by a busy core reads fewer of them. False if any
// run fails.
bool ScanRuns(std::string_view json, size_t first, size_t end,
              const WireTailFields& fields, std::vector<ScannedRange>* runs,
              PrefixReleaser* releaser) {
  const bool large = json.size() >= kParallelDecodeBytes;
  const std::vector<size_t> cuts =
      large ? FindPartBoundaries(json, first, end, kScanRuns)
            : std::vector<size_t>();
  const size_t n = cuts.size() + 1;
  std::vector<std::pair<size_t, size_t>> bounds(n);
  for (size_t r = 0; r < n; ++r) {
    bounds[r] = {r == 0 ? first : cuts[r - 1] + 1, r + 1 == n ? end : cuts[r]};
  }
  if (releaser != nullptr) releaser->Start(bounds);
  runs->assign(n, {});
  std::atomic<bool> failed{false};
  ForEachClaimed(n, 2, [&](size_t r, unsigned) {
    if (failed.load()) return;
    const auto [begin, stop] = bounds[r];
    if (!ScanParts(json, begin, stop, fields, &(*runs)[r])) {
      failed = true;
    } else if (releaser != nullptr) {
      releaser->RunDone(r);
    }
  });
  return !failed.load();
}

}  // namespace

std::optional<CanonicalSpec> ReadCanonicalPlacement(std::string_view json,
                                                    bool* released) {
  constexpr std::string_view kHead = "{\"parts\":[";
  constexpr std::string_view kAfterParts = "],\"placement_id\":\"";
  if (!json.starts_with(kHead)) return std::nullopt;
  const size_t end = json.rfind(kAfterParts);
  if (end == std::string_view::npos || end <= kHead.size()) return std::nullopt;
  Result<WireTailFields> fields = ReadWireTail(json.substr(end + 1));
  if (!fields.ok()) return std::nullopt;
  const size_t first = kHead.size();
  std::vector<ScannedRange> runs;
  std::optional<PrefixReleaser> releaser;
  if (released != nullptr && json.size() >= kParallelDecodeBytes) {
    releaser.emplace(json, end + 1);
  }
  const bool scanned = ScanRuns(json, first, end, *fields, &runs,
                                releaser ? &*releaser : nullptr);
  std::optional<Sha256> prefix_hash;
  if (releaser) {
    if (scanned) prefix_hash = releaser->Finish();
    releaser->Stop();
    *released = releaser->released();
    if (!prefix_hash) return std::nullopt;
  }
  if (!scanned) return std::nullopt;
  std::vector<WeightPlacementPart> parts = std::move(runs[0].parts);
  std::vector<uint8_t> referenced = std::move(runs[0].referenced);
  for (size_t r = 1; r < runs.size(); ++r) {
    for (auto& p : runs[r].parts) parts.push_back(std::move(p));
    for (size_t k = 0; k < referenced.size(); ++k) {
      referenced[k] |= runs[r].referenced[k];
    }
  }
  // Ascending participant ids: the order WeightPlacementManifest keeps.
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!(parts[i - 1].participant_id() < parts[i].participant_id())) {
      return std::nullopt;
    }
  }
  for (uint8_t r : referenced) {
    if (!r) return std::nullopt;
  }
  WireTailFields& f = *fields;
  return CanonicalSpec{
      {f.header, std::move(*f.topology), std::move(parts),
       std::move(f.placement_id)},
      prefix_hash ? std::string_view() : json.substr(0, end + 1),
      std::move(prefix_hash)};
}

Result<WeightPlacementManifest> PlacementDecoder::FromOwnedJson(
    std::string json, const std::function<Result<std::string>()>& reread) {
  if (reread) {
    bool released = false;
    std::optional<CanonicalSpec> canonical =
        ReadCanonicalPlacement(json, &released);
    if (canonical.has_value()) {
      // What is left of the text goes first, unless the identities are
      // still to hash it (a document too small to be given back).
      if (canonical->prefix_hash) std::string().swap(json);
      return WeightPlacementManifest::Assemble(
          std::move(canonical->spec), canonical->prefix,
          canonical->prefix_hash ? &*canonical->prefix_hash : nullptr);
    }
    if (released) {
      // Not canonical after all, and parts of the text are gone: the
      // general decoder reads it again.
      RESHARD_ASSIGN_OR_RETURN(json, reread());
    }
  }
  return WeightPlacementFromJson(json);
}

Result<WeightPlacementManifest> PlacementDecoder::FromMappedJson(
    std::string_view json) {
  bool released = false;
  std::optional<CanonicalSpec> canonical =
      ReadCanonicalPlacement(json, &released);
  if (canonical.has_value()) {
    return WeightPlacementManifest::Assemble(
        std::move(canonical->spec), canonical->prefix,
        canonical->prefix_hash ? &*canonical->prefix_hash : nullptr);
  }
  return WeightPlacementFromJson(json);
}

}  // namespace internal

Result<WeightPlacementManifest> WeightPlacementFromJson(std::string_view json) {
  using namespace internal;  // NOLINT: the reader helpers
  // Canonical input (what every writer of the wire emits) is read from its
  // bytes; anything else, and every error, by the general decoder.
  if (std::optional<CanonicalSpec> canonical = ReadCanonicalPlacement(json)) {
    return WeightPlacementManifest::Assemble(std::move(canonical->spec),
                                             canonical->prefix);
  }
  RESHARD_ASSIGN_OR_RETURN(JsonDocument doc, JsonDocument::Parse(json));
  const JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj,
      StrictObject::Make(doc.root(), root, "placement manifest",
                         {"parts", "placement_id", "placement_set_id",
                          "resource_id", "resource_kind", "revision", "tensors",
                          "topology", "weight_generation"}));
  RESHARD_ASSIGN_OR_RETURN(PlacementHeader header, ReadHeader(obj));
  RESHARD_ASSIGN_OR_RETURN(std::string placement_id, obj.Id("placement_id"));
  RESHARD_ASSIGN_OR_RETURN(ParallelTopology topology,
                           obj.Decode("topology", ReadTopology));
  RESHARD_ASSIGN_OR_RETURN(TensorTable table, ReadTensorTable(obj));
  RESHARD_ASSIGN_OR_RETURN(JsonArray parts, obj.Array("parts"));
  RESHARD_ASSIGN_OR_RETURN(
      std::vector<WeightPlacementPart> decoded,
      DecodeParts(parts, header, topology.topology_id(), table, json.size()));
  WeightPlacementManifestSpec spec{header, std::move(topology),
                                   std::move(decoded), std::move(placement_id)};
  return WeightPlacementManifest::Make(std::move(spec));
}

}  // namespace reshard
