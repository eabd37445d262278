// WeightStore::UploadShare: ranks that each hold part of the source
// participants upload one revision together, meeting in the store. Ranks
// run as threads of one process here (each with its own store handle and
// its own binding instance); python/tests/test_store_multiprocess.py runs
// them as processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

WeightPlacementManifest Layout(int64_t tp, int64_t tp_dim) {
  auto d = testing::GridDraft({.tp = tp});
  testing::AddTensor(&d, {.tensor_id = "w", .shape = {64, 32}, .tp_dim = 1});
  testing::AddTensor(&d,
                     {.tensor_id = "v", .shape = {64, 32}, .tp_dim = tp_dim});
  return Must(d.Build());
}

std::string Participant(int64_t tp) {
  return testing::ParticipantId({.tp = tp});
}

struct Rank {
  HostBuffers buffers;
  Result<StoredWeightManifest> result = Status::Internal("not run");
};

// Runs every rank on its own thread with its own store handle.
void RunRanks(const std::string& dir, const WeightPlacementManifest& m,
              std::vector<Rank>& ranks, const std::string& upload_id,
              std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      WeightStore store = Must(WeightStore::Open(dir));
      ShareUploadOptions o{.upload_id = upload_id,
                           .rank = static_cast<int>(r),
                           .ranks = static_cast<int>(ranks.size()),
                           .timeout = timeout};
      ranks[r].result = store.UploadShare(m, ranks[r].buffers.bindings, o);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ShareUploadTest, EachRankUploadsItsShareOfOneRevision) {
  testing::TempDir dir;
  const WeightPlacementManifest src = Layout(2, 0);
  const auto tensors = internal::TensorIndex(src);
  // Ranks 0 and 1 hold one participant each; rank 2 holds nothing.
  std::vector<Rank> ranks(3);
  for (int r = 0; r < 2; ++r) {
    ranks[r].buffers = Must(AllocateHostBuffers(
        src, "rank-" + std::to_string(r), {Participant(r)}));
    internal::FillPattern(src, tensors, ranks[r].buffers);
  }
  RunRanks(dir.path(), src, ranks, "step-1");
  for (const Rank& r : ranks) ASSERT_OK(r.result);
  const StoredWeightManifest& m = *ranks[0].result;
  for (const Rank& r : ranks) {
    EXPECT_EQ(r.result->manifest_digest(), m.manifest_digest());
  }
  // The revision loads byte-exactly into another layout.
  WeightStore store = Must(WeightStore::Open(dir.path()));
  const WeightPlacementManifest dst = Layout(4, 1);
  HostBuffers out = Must(AllocateHostBuffers(dst, "target"));
  Must(store.Load(Must(store.ReadManifest(m.manifest_key())), dst,
                  out.bindings));
  EXPECT_EQ(internal::VerifyPattern(dst, internal::TensorIndex(dst), out), "");
  // The revision is what a process waiting for one finds.
  EXPECT_EQ(Must(store.ManifestKeys(src.resource_id())),
            std::vector<std::string>{m.manifest_key()});
  EXPECT_TRUE(Must(store.ManifestKeys("other-model")).empty());
  // An upload id is one attempt: taking part twice is refused.
  Rank again;
  again.buffers = Must(AllocateHostBuffers(src, "rank-0", {Participant(0)}));
  auto twice =
      store.UploadShare(src, again.buffers.bindings,
                        {.upload_id = "step-1", .rank = 0, .ranks = 3});
  EXPECT_THAT(twice, StatusIs(StatusCode::kAlreadyExists,
                              HasSubstr("each attempt needs a new upload_id")));
}

TEST(ShareUploadTest, MissingShareIsNamedByEveryRank) {
  testing::TempDir dir;
  const WeightPlacementManifest src = Layout(2, 0);
  // Rank 0 holds participant 0, rank 1 nothing: nobody holds participant 1.
  std::vector<Rank> ranks(2);
  ranks[0].buffers = Must(AllocateHostBuffers(src, "rank-0", {Participant(0)}));
  RunRanks(dir.path(), src, ranks, "partial");
  const std::string why =
      "source manifests have no complete generation-consistent DP replica: "
      "DP replica 0 is missing participant " +
      Participant(1);
  EXPECT_THAT(ranks[0].result,
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr(why)));
  EXPECT_THAT(ranks[1].result,
              StatusIs(StatusCode::kAborted, HasSubstr("rank 0 failed: ")));
  EXPECT_THAT(ranks[1].result.status().message(), HasSubstr(why));
}

TEST(ShareUploadTest, AbsentRankTimesOutNamed) {
  testing::TempDir dir;
  const WeightPlacementManifest src = Layout(2, 0);
  std::vector<Rank> ranks(1);
  ranks[0].buffers = Must(AllocateHostBuffers(src, "rank-0"));
  WeightStore store = Must(WeightStore::Open(dir.path()));
  auto r = store.UploadShare(src, ranks[0].buffers.bindings,
                             {.upload_id = "alone",
                              .rank = 0,
                              .ranks = 3,
                              .timeout = std::chrono::milliseconds(200)});
  EXPECT_THAT(r, StatusIs(StatusCode::kUnavailable,
                          HasSubstr("timed out after 200 ms waiting for the "
                                    "bindings of rank(s) 1, 2")));
  EXPECT_THAT(
      store.UploadShare(src, {}, {.upload_id = "x", .rank = 2, .ranks = 2}),
      StatusIs(StatusCode::kInvalidArgument, "upload rank 2 is not in [0, 2)"));
}

}  // namespace
}  // namespace reshard
