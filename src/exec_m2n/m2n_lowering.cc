#include "exec_m2n/m2n_lowering.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace reshard::m2n {
namespace {

struct Refusal {
  std::string rule;
  std::string detail;
};

// One side's lowering or the rule it breaks.
struct SideResult {
  std::optional<M2nSide> side;
  Refusal refusal;
};

SideResult Refuse(std::string rule, std::string detail) {
  return SideResult{std::nullopt, {std::move(rule), std::move(detail)}};
}

std::string JoinInts(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(values[i]);
  }
  return out;
}

std::string DimsText(const Dims& dims) {
  return "[" + JoinInts(std::vector<int64_t>(dims.begin(), dims.end())) + "]";
}

// The tensor dimensions the side's boxes split (a box narrower than the
// tensor there).
std::vector<size_t> SplitDims(const Dims& global,
                              const std::vector<M2nBox>& boxes) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < global.size(); ++d) {
    for (const M2nBox& box : boxes) {
      if (box.shape[d] != global[d]) {
        dims.push_back(d);
        break;
      }
    }
  }
  return dims;
}

// The part (chunk index) each box holds along `dim`, given DTensor's
// chunking of `extent` into `parts` chunks of ceil(extent / parts).
// Empty when the boxes are not those chunks.
std::vector<int64_t> ChunkIndices(const std::vector<M2nBox>& boxes, size_t dim,
                                  int64_t extent, int64_t parts) {
  const int64_t chunk = (extent + parts - 1) / parts;
  std::vector<int64_t> indices;
  for (const M2nBox& box : boxes) {
    const int64_t offset = box.offset[dim];
    if (offset % chunk != 0) return {};
    const int64_t index = offset / chunk;
    if (index >= parts) return {};
    if (box.shape[dim] != std::min(chunk, extent - offset)) return {};
    indices.push_back(index);
  }
  return indices;
}

// Row-major mesh candidates for `n` ranks holding `parts` chunks with
// `replicas` ranks each: the mesh, its placements, and the chunk of the
// rank at each position.
struct MeshCandidate {
  std::vector<int> dims;
  std::vector<int> placements;
  std::vector<int64_t> chunk_at;
};

std::vector<MeshCandidate> Candidates(int64_t parts, int64_t replicas,
                                      int dim) {
  const int64_t n = parts * replicas;
  std::vector<MeshCandidate> out;
  auto add = [&](std::vector<int> dims, std::vector<int> placements,
                 auto chunk_of) {
    MeshCandidate c{std::move(dims), std::move(placements), {}};
    for (int64_t p = 0; p < n; ++p) c.chunk_at.push_back(chunk_of(p));
    out.push_back(std::move(c));
  };
  const int k = static_cast<int>(parts);
  const int r = static_cast<int>(replicas);
  if (parts == 1) {
    add({r}, {kReplicate}, [](int64_t) { return int64_t{0}; });
  } else if (replicas == 1) {
    add({k}, {dim}, [](int64_t p) { return p; });
  } else {
    add({r, k}, {kReplicate, dim}, [&](int64_t p) { return p % parts; });
    add({k, r}, {dim, kReplicate}, [&](int64_t p) { return p / replicas; });
  }
  return out;
}

// The chunk structure of a side: which dimension is split into how many
// chunks, and the chunk of every box; or the rule it breaks.
struct Chunking {
  int dim = kReplicate;
  int64_t parts = 1;
  std::vector<int64_t> chunk_of_box;
};

std::optional<Refusal> FindChunking(const Dims& global,
                                    const std::vector<M2nBox>& boxes,
                                    std::string_view side, Chunking* out) {
  const std::vector<size_t> split = SplitDims(global, boxes);
  out->chunk_of_box.assign(boxes.size(), 0);
  if (split.empty()) return std::nullopt;
  if (split.size() > 1) {
    return Refusal{"one-shard-axis",
                   std::string(side) + " boxes split dimensions " +
                       JoinInts({int64_t(split[0]), int64_t(split[1])}) +
                       "; a sharded layout has exactly one SHARD mesh axis"};
  }
  const size_t d = split[0];
  std::vector<int64_t> offsets;
  for (const M2nBox& box : boxes) offsets.push_back(box.offset[d]);
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  const int64_t parts = static_cast<int64_t>(offsets.size());
  std::vector<int64_t> chunks = ChunkIndices(boxes, d, global[d], parts);
  if (chunks.empty() || parts == 1) {
    return Refusal{"dtensor-chunks",
                   std::string(side) + " boxes of dimension " +
                       std::to_string(d) + " (extent " +
                       std::to_string(global[d]) + ", offsets " +
                       JoinInts(offsets) + ") are not DTensor's chunks"};
  }
  if (global[d] % parts != 0) {
    const int64_t chunk = (global[d] + parts - 1) / parts;
    return Refusal{
        "even-split",
        std::string(side) + " dimension " + std::to_string(d) + " of " +
            std::to_string(global[d]) + " in " + std::to_string(parts) +
            " chunks is uneven (DTensor's chunks of " + std::to_string(chunk) +
            "); ncclReshard takes one local shape per side"};
  }
  *out = Chunking{static_cast<int>(d), parts, std::move(chunks)};
  return std::nullopt;
}

std::string RankRange(int first, size_t n) {
  return std::to_string(first) + "-" + std::to_string(first + int(n) - 1);
}

// The ranks' interval and the chunk at each position of it.
std::optional<Refusal> OrderRanks(const std::vector<M2nBox>& boxes,
                                  const Chunking& c, std::string_view side,
                                  int* start, std::vector<int64_t>* chunk_at) {
  std::vector<std::pair<int, int64_t>> ranked;
  for (size_t i = 0; i < boxes.size(); ++i) {
    ranked.emplace_back(boxes[i].rank, c.chunk_of_box[i]);
  }
  std::sort(ranked.begin(), ranked.end());
  *start = ranked.front().first;
  std::vector<int64_t> ranks;
  for (const auto& [rank, chunk] : ranked) {
    ranks.push_back(rank);
    chunk_at->push_back(chunk);
  }
  if (ranked.back().first - *start + 1 != static_cast<int>(ranked.size())) {
    return Refusal{"contiguous-ranks",
                   std::string(side) + " ranks " + JoinInts(ranks) +
                       " are not one interval [start, start + n)"};
  }
  return std::nullopt;
}

// Every chunk held by the same number of ranks, its replicas.
std::optional<Refusal> CheckReplicas(const Chunking& c, std::string_view side,
                                     int64_t* replicas) {
  std::vector<int64_t> holders(static_cast<size_t>(c.parts), 0);
  for (int64_t chunk : c.chunk_of_box) ++holders[chunk];
  for (int64_t i = 1; i < c.parts; ++i) {
    if (holders[i] != holders[0]) {
      return Refusal{
          "uniform-replicas",
          std::string(side) + " chunk 0 of dimension " + std::to_string(c.dim) +
              " is held by " + std::to_string(holders[0]) + " ranks, chunk " +
              std::to_string(i) + " by " + std::to_string(holders[i])};
    }
  }
  *replicas = holders[0];
  return std::nullopt;
}

SideResult LowerSide(const Dims& global, const std::vector<M2nBox>& boxes,
                     std::string_view side, int max_ranks) {
  if (boxes.empty()) {
    return Refuse("dtensor-chunks", std::string(side) + " holds no box");
  }
  for (const M2nBox& box : boxes) {
    if (box.offset.size() != global.size() ||
        box.shape.size() != global.size()) {
      return Refuse("dtensor-chunks", std::string(side) + " rank " +
                                          std::to_string(box.rank) +
                                          " has a box of another rank");
    }
  }
  std::map<int, int> seen;
  for (const M2nBox& box : boxes) {
    if (++seen[box.rank] > 1) {
      return Refuse("one-box-per-rank",
                    std::string(side) + " rank " + std::to_string(box.rank) +
                        " holds more than one box of the tensor; "
                        "ncclReshard takes one local tensor per rank");
    }
  }
  Chunking chunking;
  if (auto r = FindChunking(global, boxes, side, &chunking)) {
    return Refuse(r->rule, r->detail);
  }
  int64_t replicas = 0;
  if (auto r = CheckReplicas(chunking, side, &replicas)) {
    return Refuse(r->rule, r->detail);
  }
  int start = 0;
  std::vector<int64_t> chunk_at;
  if (auto r = OrderRanks(boxes, chunking, side, &start, &chunk_at)) {
    return Refuse(r->rule, r->detail);
  }
  for (MeshCandidate& c : Candidates(chunking.parts, replicas, chunking.dim)) {
    if (c.chunk_at != chunk_at) continue;
    if (static_cast<int>(boxes.size()) > max_ranks) {
      return Refuse(std::string(side) + "-count",
                    std::to_string(boxes.size()) + " " + std::string(side) +
                        " ranks, at most " + std::to_string(max_ranks));
    }
    Dims local = global;
    if (chunking.dim != kReplicate) local[chunking.dim] /= chunking.parts;
    return SideResult{M2nSide{M2nMesh{std::move(c.dims), start},
                              std::move(c.placements), std::move(local)},
                      {}};
  }
  return Refuse("mesh-dims",
                std::string(side) + " ranks " + RankRange(start, boxes.size()) +
                    " hold " + std::to_string(chunking.parts) +
                    " chunk(s) with " + std::to_string(replicas) +
                    " replica(s) each in an order no row-major mesh of at "
                    "most 2 dims gives");
}

std::string PlacementsText(const std::vector<int>& placements) {
  std::string out;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i > 0) out += ",";
    out += placements[i] == kReplicate
               ? std::string("R")
               : "S(" + std::to_string(placements[i]) + ")";
  }
  return out;
}

std::string SideText(const M2nSide& side) {
  std::vector<int64_t> dims(side.mesh.dims.begin(), side.mesh.dims.end());
  return "[" + JoinInts(dims) + "]@" + std::to_string(side.mesh.start_rank) +
         " " + PlacementsText(side.placements) + " local " +
         DimsText(side.local_shape);
}

M2nDecision Refused(const M2nTensorInput& in, std::string rule,
                    std::string detail) {
  std::string reason = "tensor \"" + in.tensor_id +
                       "\": not lowered to ncclReshard: rule " + rule + ": " +
                       detail;
  return M2nDecision{in.tensor_id, std::nullopt, std::move(rule),
                     std::move(reason)};
}

constexpr std::array<std::pair<std::string_view, M2nDtype>, 12> kDtypes{{
    {"int8", M2nDtype::kInt8},
    {"uint8", M2nDtype::kUint8},
    {"float8_e4m3fn", M2nDtype::kFloat8e4m3},
    {"float8_e5m2", M2nDtype::kFloat8e5m2},
    {"float16", M2nDtype::kFloat16},
    {"bfloat16", M2nDtype::kBfloat16},
    {"int32", M2nDtype::kInt32},
    {"uint32", M2nDtype::kUint32},
    {"float32", M2nDtype::kFloat32},
    {"int64", M2nDtype::kInt64},
    {"uint64", M2nDtype::kUint64},
    {"float64", M2nDtype::kFloat64},
}};

}  // namespace

std::optional<M2nDtype> ParseM2nDtype(std::string_view dtype) {
  for (const auto& [name, value] : kDtypes) {
    if (name == dtype) return value;
  }
  return std::nullopt;
}

std::string DescribeM2nTensor(const M2nTensor& tensor) {
  return "src " + SideText(tensor.source) + " -> dst " +
         SideText(tensor.target);
}

M2nDecision LowerTensorToM2n(const M2nTensorInput& in) {
  const size_t ndim = in.global_shape.size();
  if (ndim < 1 || ndim > static_cast<size_t>(kMaxTensorDims)) {
    return Refused(in, "tensor-rank",
                   std::to_string(ndim) + " dimensions, 1 to " +
                       std::to_string(kMaxTensorDims));
  }
  const std::optional<M2nDtype> dtype = ParseM2nDtype(in.source_dtype);
  if (!dtype) {
    return Refused(in, "dtype",
                   in.source_dtype + " is not a dtype ncclReshard moves");
  }
  if (in.target_dtype != in.source_dtype) {
    return Refused(in, "same-dtype",
                   "source " + in.source_dtype + ", target " + in.target_dtype +
                       "; ncclReshard moves bytes and converts nothing");
  }
  SideResult source =
      LowerSide(in.global_shape, in.source, "source", kMaxSources);
  if (!source.side) {
    return Refused(in, source.refusal.rule, source.refusal.detail);
  }
  SideResult target =
      LowerSide(in.global_shape, in.target, "target", kMaxTargets);
  if (!target.side) {
    return Refused(in, target.refusal.rule, target.refusal.detail);
  }
  const int s0 = source.side->mesh.start_rank;
  const int s1 = s0 + static_cast<int>(in.source.size());
  const int t0 = target.side->mesh.start_rank;
  const int t1 = t0 + static_cast<int>(in.target.size());
  if (in.comm_size > 1 && s0 < t1 && t0 < s1) {
    return Refused(in, "disjoint-sides",
                   "source ranks " + RankRange(s0, in.source.size()) +
                       " and target ranks " + RankRange(t0, in.target.size()) +
                       " overlap in a communicator of " +
                       std::to_string(in.comm_size) + " ranks");
  }
  return M2nDecision{in.tensor_id,
                     M2nTensor{in.tensor_id, *dtype, std::move(*source.side),
                               std::move(*target.side)},
                     "", ""};
}

}  // namespace reshard::m2n
