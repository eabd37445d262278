// The host emulation of ncclReshard on hand-written descriptors: DTensor
// boxes from a side alone, row shards to column shards, replicas to
// shards over a 2-D mesh, a 2-D mesh to a 1-D one, every target element
// checked against its global index; a descriptor that misdescribes the
// sources moves wrong bytes, and refused or differing groups fail on every
// rank.

#include "exec_m2n/m2n_host_emulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::m2n {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

M2nSide Side(std::vector<int> dims, int start, std::vector<int> placements,
             Dims local) {
  return M2nSide{M2nMesh{std::move(dims), start}, std::move(placements),
                 std::move(local)};
}

// Each rank's int32 buffers of one tensor, sources holding the global
// row-major index of each element as `held` says (by default, the box
// the source descriptor names), targets -1.
struct Buffers {
  std::vector<std::vector<int32_t>> source, target;
};

Buffers Fill(const M2nTensor& t, int comm_size, const M2nSide* held = nullptr) {
  const M2nSide& truth = held != nullptr ? *held : t.source;
  const Dims global = SideGlobalShape(truth);
  Buffers b;
  b.source.resize(comm_size);
  b.target.resize(comm_size);
  for (int r = 0; r < comm_size; ++r) {
    if (auto box = SideBox(truth, r)) {
      int64_t n = 1;
      for (int64_t e : box->shape) n *= e;
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i, g = 0, stride = 1;
        for (size_t d = box->shape.size(); d-- > 0;) {
          g += (box->offset[d] + rest % box->shape[d]) * stride;
          rest /= box->shape[d];
          stride *= global[d];
        }
        b.source[r].push_back(static_cast<int32_t>(g));
      }
    }
    if (auto box = SideBox(t.target, r)) {
      int64_t n = 1;
      for (int64_t e : box->shape) n *= e;
      b.target[r].assign(n, -1);
    }
  }
  return b;
}

// Every rank on a thread of its own posts `t` and polls; each rank's
// outcome ("ok" or the error).
std::vector<std::string> RunGroup(const std::string& key, int comm_size,
                                  const std::vector<M2nTensor>& per_rank,
                                  Buffers& b) {
  auto comm = Must(HostM2nComm::Join(key, comm_size));
  std::vector<std::string> outcome(comm_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < comm_size; ++r) {
    threads.emplace_back([&, r] {
      M2nBuffers mine{b.source[r].empty() ? nullptr : b.source[r].data(),
                      b.target[r].empty() ? nullptr : b.target[r].data()};
      Status st = comm->Post(r, {per_rank[r]}, {mine});
      while (st.ok()) {
        Result<bool> done = comm->Poll(r);
        if (!done.ok()) st = done.status();
        if (!done.ok() || *done) break;
        std::this_thread::yield();
      }
      outcome[r] = st.ok() ? "ok" : std::string(st.message());
    });
  }
  for (auto& t : threads) t.join();
  return outcome;
}

// Elements of the targets that are not their global index.
int64_t Wrong(const M2nTensor& t, const Buffers& b) {
  const Dims global = SideGlobalShape(t.target);
  int64_t wrong = 0;
  for (size_t r = 0; r < b.target.size(); ++r) {
    auto box = SideBox(t.target, static_cast<int>(r));
    if (!box) continue;
    for (size_t i = 0; i < b.target[r].size(); ++i) {
      int64_t rest = static_cast<int64_t>(i), g = 0, stride = 1;
      for (size_t d = box->shape.size(); d-- > 0;) {
        g += (box->offset[d] + rest % box->shape[d]) * stride;
        rest /= box->shape[d];
        stride *= global[d];
      }
      wrong += b.target[r][i] != g;
    }
  }
  return wrong;
}

std::vector<std::string> All(int n, const std::string& s) {
  return std::vector<std::string>(n, s);
}

TEST(M2nHostEmulationTest, BoxesComeFromTheDescriptorAlone) {
  const M2nSide side = Side({2, 3}, 4, {kReplicate, 1}, {8, 2});
  EXPECT_EQ(SideGlobalShape(side), Dims({8, 6}));
  EXPECT_FALSE(SideBox(side, 3).has_value());
  EXPECT_FALSE(SideBox(side, 10).has_value());
  const M2nBox b = *SideBox(side, 9);  // coordinate (1, 2)
  EXPECT_EQ(b.rank, 9);
  EXPECT_EQ(b.offset, Dims({0, 4}));
  EXPECT_EQ(b.shape, Dims({8, 2}));
  // Two axes splitting one dimension nest, axis 0 outermost.
  const M2nSide nested = Side({2, 2}, 0, {0, 0}, {3, 5});
  EXPECT_EQ(SideGlobalShape(nested), Dims({12, 5}));
  EXPECT_EQ(SideBox(nested, 2)->offset, Dims({6, 0}));
  EXPECT_EQ(SideBox(nested, 1)->offset, Dims({3, 0}));
  EXPECT_EQ(M2nDtypeBytes(M2nDtype::kBfloat16), 2u);
  EXPECT_EQ(M2nDtypeBytes(M2nDtype::kFloat64), 8u);
}

// [4, 6] int32 in row halves on ranks 0, 1 -> column thirds on 2, 3, 4.
TEST(M2nHostEmulationTest, RowShardsBecomeColumnShards) {
  const M2nTensor t{"w", M2nDtype::kInt32, Side({2}, 0, {0}, {2, 6}),
                    Side({3}, 2, {1}, {4, 2})};
  Buffers b = Fill(t, 5);
  EXPECT_EQ(RunGroup("rows-to-columns", 5, std::vector<M2nTensor>(5, t), b),
            All(5, "ok"));
  EXPECT_EQ(Wrong(t, b), 0);
  EXPECT_EQ(b.target[3], std::vector<int32_t>({2, 3, 8, 9, 14, 15, 20, 21}));
}

// One replica of a [4, 3, 2] tensor -> a [2, 2] mesh, replicated on axis
// 0 and split on tensor dimension 0 along axis 1.
TEST(M2nHostEmulationTest, AReplicaBecomesShardsOfATwoDimensionalMesh) {
  const M2nTensor t{"w", M2nDtype::kInt32,
                    Side({1}, 0, {kReplicate}, {4, 3, 2}),
                    Side({2, 2}, 1, {kReplicate, 0}, {2, 3, 2})};
  Buffers b = Fill(t, 5);
  EXPECT_EQ(RunGroup("replica-to-2d", 5, std::vector<M2nTensor>(5, t), b),
            All(5, "ok"));
  EXPECT_EQ(Wrong(t, b), 0);
  EXPECT_EQ(b.target[1], b.target[3]);  // replicas of chunk 0
  EXPECT_EQ(b.target[2].front(), 12);   // chunk 1 starts at row 2
}

// A [2, 2] mesh (replicas of column halves) -> row halves on ranks 4, 5;
// the chunks come from the lowest-ranked replica, every byte right.
TEST(M2nHostEmulationTest, ATwoDimensionalMeshBecomesRowShards) {
  const M2nTensor t{"w", M2nDtype::kInt32,
                    Side({2, 2}, 0, {kReplicate, 1}, {4, 3}),
                    Side({2}, 4, {0}, {2, 6})};
  Buffers b = Fill(t, 6);
  EXPECT_EQ(RunGroup("2d-to-rows", 6, std::vector<M2nTensor>(6, t), b),
            All(6, "ok"));
  EXPECT_EQ(Wrong(t, b), 0);
}

// The sources hold rows split along mesh axis 0 ([2, 2] S(0),R), but the
// descriptor says axis 1 (R,S(0)): the same shapes, so ncclReshard takes
// it, and half of the rows arrive from the wrong ranks.
TEST(M2nHostEmulationTest, AMisdescribedSourceMovesWrongBytes) {
  const M2nSide held = Side({2, 2}, 0, {0, kReplicate}, {2, 4});
  const M2nTensor t{"w", M2nDtype::kInt32,
                    Side({2, 2}, 0, {kReplicate, 0}, {2, 4}),
                    Side({1}, 4, {kReplicate}, {4, 4})};
  Buffers b = Fill(t, 5, &held);
  EXPECT_EQ(RunGroup("misdescribed", 5, std::vector<M2nTensor>(5, t), b),
            All(5, "ok"));
  EXPECT_EQ(Wrong(t, b), 8);
  // Described truly, the same buffers move right.
  const M2nTensor truth{"w", M2nDtype::kInt32, held, t.target};
  Buffers c = Fill(truth, 5);
  EXPECT_EQ(RunGroup("described", 5, std::vector<M2nTensor>(5, truth), c),
            All(5, "ok"));
  EXPECT_EQ(Wrong(truth, c), 0);
}

TEST(M2nHostEmulationTest, RefusedAndDifferingGroupsFailOnEveryRank) {
  const M2nTensor t{"w", M2nDtype::kInt32, Side({2}, 0, {0}, {2, 6}),
                    Side({2}, 2, {1}, {4, 2})};  // [4, 6] against [4, 4]
  Buffers b = Fill(t, 4);
  EXPECT_EQ(RunGroup("refused", 4, std::vector<M2nTensor>(4, t), b),
            All(4,
                "ncclInvalidArgument: ncclReshard: the source describes "
                "global shape [4,6], the target [4,4] (tensor \"w\")"));
  EXPECT_EQ(b.target[2], std::vector<int32_t>(8, -1));

  const M2nTensor good{"w", M2nDtype::kInt32, Side({2}, 0, {0}, {2, 6}),
                       Side({2}, 2, {1}, {4, 3})};
  std::vector<M2nTensor> per_rank(4, good);
  per_rank[3].target.placements = {0};
  Buffers c = Fill(good, 4);
  EXPECT_EQ(RunGroup("differing", 4, per_rank, c),
            All(4,
                "ncclInvalidUsage: the ranks posted different groups of "
                "tensors (tensor 0 differs)"));

  const M2nTensor outside{"w", M2nDtype::kInt32, Side({2}, 0, {0}, {2, 6}),
                          Side({2}, 3, {1}, {4, 3})};
  EXPECT_EQ(CheckM2nDescriptor(outside, 4),
            "ncclInvalidArgument: ncclReshard: target mesh ranks [3, 5) "
            "outside the communicator of 4");
  auto held = Must(HostM2nComm::Join("held", 4));
  EXPECT_THAT(HostM2nComm::Join("held", 3),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidUsage: the emulated M2N communicator has 4 "
                       "ranks, not 3"));
}

// A rank that gives up withdraws its group (its buffers are never
// touched, the others' group never completes); once every rank posted,
// the group is done and can no longer be withdrawn.
TEST(M2nHostEmulationTest, AWithdrawnGroupNeverMoves) {
  const M2nTensor t{"w", M2nDtype::kInt32, Side({1}, 0, {kReplicate}, {2, 2}),
                    Side({1}, 1, {kReplicate}, {2, 2})};
  Buffers b = Fill(t, 2);
  auto comm = Must(HostM2nComm::Join("withdrawn", 2));
  const std::vector<M2nBuffers> zero{{b.source[0].data(), nullptr}};
  const std::vector<M2nBuffers> one{{nullptr, b.target[1].data()}};
  EXPECT_OK(comm->Post(1, {t}, one));
  EXPECT_FALSE(Must(comm->Poll(1)));
  EXPECT_TRUE(comm->Abort(1));
  EXPECT_OK(comm->Post(0, {t}, zero));
  EXPECT_FALSE(Must(comm->Poll(0)));
  EXPECT_EQ(b.target[1], std::vector<int32_t>(4, -1));
  // Rank 1 posts again: the group completes, and is done for both.
  EXPECT_OK(comm->Post(1, {t}, one));
  EXPECT_TRUE(Must(comm->Poll(1)));
  EXPECT_FALSE(comm->Abort(0));
  EXPECT_TRUE(Must(comm->Poll(0)));
  EXPECT_EQ(b.target[1], std::vector<int32_t>({0, 1, 2, 3}));
}

}  // namespace
}  // namespace reshard::m2n
