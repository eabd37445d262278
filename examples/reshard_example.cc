// Reshards one float32 weight from a TP2 layout (split along rows) to a
// TP4 layout (split along columns) in this process, and checks every byte.
//
// The steps a framework takes: describe each layout as a placement, bind
// the memory that holds each fragment, call Reshard.

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/placement.h"
#include "reshard/reshard.h"

namespace {

constexpr int64_t kRows = 8;
constexpr int64_t kCols = 12;

// The [kRows, kCols] float32 tensor "proj.weight" split `tp` ways along
// dimension `dim`, one fragment per TP rank.
reshard::Result<reshard::WeightPlacementManifest> Layout(int64_t tp,
                                                         int64_t dim) {
  RESHARD_ASSIGN_OR_RETURN(reshard::ParallelAxis split,
                           reshard::SplitAxis(reshard::AxisKind::kTp, dim));
  RESHARD_ASSIGN_OR_RETURN(reshard::TensorDescriptor tensor,
                           reshard::TensorDescriptor::Make(
                               {.tensor_id = "proj.weight",
                                .global_shape = {kRows, kCols},
                                .dtype = "float32",
                                .itemsize = 4,
                                .shard_dims = {dim},
                                .layout_fingerprint = "float32:row-major",
                                .parallel_axes = {split}}));
  reshard::ParallelTopologySpec topology{.sizes = {.tp = tp}};
  std::vector<reshard::PlacementFragment> fragments;
  for (int64_t r = 0; r < tp; ++r) {
    const reshard::ParallelRank rank{.tp = r};
    topology.participants.push_back({"tp" + std::to_string(r), rank});
    reshard::Dims offset = {0, 0};
    reshard::Dims shape = {kRows, kCols};
    shape[dim] /= tp;
    offset[dim] = r * shape[dim];
    RESHARD_ASSIGN_OR_RETURN(
        reshard::PlacementFragment fragment,
        reshard::PlacementFragment::Make(
            {.tensor_id = "proj.weight",
             .global_offset = offset,
             .local_shape = shape,
             .nbytes = static_cast<uint64_t>(shape[0] * shape[1] * 4),
             .rank = rank}));
    fragments.push_back(std::move(fragment));
  }
  RESHARD_ASSIGN_OR_RETURN(
      reshard::ParallelTopology topo,
      reshard::ParallelTopology::Make(std::move(topology)));
  return reshard::WeightPlacementManifest::FromFragments(
      {.resource_id = "example-model",
       .revision = "step-1",
       .weight_generation = 1,
       .placement_set_id = "example"},
      std::move(topo), {tensor}, std::move(fragments));
}

// The value every layout holds at global element (row, col).
float ValueAt(int64_t row, int64_t col) {
  return static_cast<float>(row * 1000 + col);
}

// Caller memory for every fragment of `placement` (a framework's tensors).
std::map<std::string, std::vector<float>> Allocate(
    const reshard::WeightPlacementManifest& placement) {
  std::map<std::string, std::vector<float>> memory;
  for (const reshard::PlacementFragment* f : placement.fragments()) {
    memory[f->placement_fragment_id()].assign(f->nbytes() / 4, -1.0f);
  }
  return memory;
}

// Calls fn(element, row, col) for each element of fragment `f`, row-major.
template <typename Fn>
void ForEachElement(const reshard::PlacementFragment& f, Fn&& fn) {
  const reshard::Dims& off = f.global_offset();
  const reshard::Dims& shape = f.local_shape();
  for (int64_t i = 0; i < shape[0]; ++i) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      fn(i * shape[1] + j, off[0] + i, off[1] + j);
    }
  }
}

reshard::Status Run() {
  RESHARD_ASSIGN_OR_RETURN(auto source, Layout(/*tp=*/2, /*dim=*/0));
  RESHARD_ASSIGN_OR_RETURN(auto target, Layout(/*tp=*/4, /*dim=*/1));

  auto source_memory = Allocate(source);
  auto target_memory = Allocate(target);
  for (const reshard::PlacementFragment* f : source.fragments()) {
    float* data = source_memory[f->placement_fragment_id()].data();
    ForEachElement(*f, [&](int64_t e, int64_t row, int64_t col) {
      data[e] = ValueAt(row, col);
    });
  }

  // Bind each participant's memory: placement fragment id -> pointer.
  auto buffer_of = [](auto& memory) {
    return [&memory](std::string_view fragment_id) -> void* {
      return memory.at(std::string(fragment_id)).data();
    };
  };
  RESHARD_ASSIGN_OR_RETURN(
      auto source_bindings,
      reshard::BindAllBuffers(source, buffer_of(source_memory),
                              {.instance_id = "trainer"}));
  RESHARD_ASSIGN_OR_RETURN(
      auto target_bindings,
      reshard::BindAllBuffers(target, buffer_of(target_memory),
                              {.instance_id = "rollout"}));

  // Plan, bind, fence and copy in this process.
  RESHARD_ASSIGN_OR_RETURN(
      reshard::ReshardReport report,
      reshard::Reshard(source, source_bindings, target, target_bindings));

  for (const reshard::PlacementFragment* f : target.fragments()) {
    const float* data = target_memory[f->placement_fragment_id()].data();
    reshard::Status wrong;
    ForEachElement(*f, [&](int64_t e, int64_t row, int64_t col) {
      if (wrong.ok() && data[e] != ValueAt(row, col)) {
        wrong = reshard::Status::DataLoss(
            "element (" + std::to_string(row) + ", " + std::to_string(col) +
            ") of fragment " + f->placement_fragment_id() + " is wrong");
      }
    });
    RESHARD_RETURN_NOT_OK(wrong);
  }
  std::printf(
      "resharded %llu bytes from TP2 (rows) to TP4 (columns) in %llu "
      "operations; every byte checked\n",
      static_cast<unsigned long long>(report.bytes),
      static_cast<unsigned long long>(report.operations));
  return reshard::Status::OK();
}

}  // namespace

int main() {
  const reshard::Status st = Run();
  if (!st.ok()) {
    std::fprintf(stderr, "reshard_example: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
