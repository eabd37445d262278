// The NCCL host emulation on its own: non-blocking initialisation, sends
// matched to receives per peer in posting order inside groups, argument
// checks with NCCL's result names, a size mismatch reported
// asynchronously, abort dropping posted work, and the recorded calls.

#include "exec_nccl/nccl_host_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::nccl {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

constexpr auto kUint8 = NcclDataType::kUint8;

// Two ranks of one communicator, each with a stream.
struct TwoRanks {
  HostNcclApi api;
  NcclUniqueId id = Must(api.GetUniqueId());
  CommHandle zero = Must(api.CommInitRank(2, id, 0, 0));
  CommHandle one = Must(api.CommInitRank(2, id, 1, 0));
  cuda::StreamHandle s0 = api.CreateStream();
  cuda::StreamHandle s1 = api.CreateStream();
};

TEST(HostNcclApiTest, InitialisationCompletesWhenEveryRankJoined) {
  HostNcclApi api;
  const NcclUniqueId id = Must(api.GetUniqueId());
  const NcclUniqueId other = Must(api.GetUniqueId());
  EXPECT_FALSE(id == other);
  const CommHandle zero = Must(api.CommInitRank(2, id, 0, 0));
  EXPECT_EQ(Must(api.CommGetAsyncError(zero)), AsyncState::kInProgress);
  const CommHandle one = Must(api.CommInitRank(2, id, 1, 0));
  EXPECT_EQ(Must(api.CommGetAsyncError(zero)), AsyncState::kSuccess);
  EXPECT_EQ(Must(api.CommGetAsyncError(one)), AsyncState::kSuccess);
  EXPECT_THAT(api.CommInitRank(2, id, 1, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidUsage: the unique id's communicator of 2 "
                       "ranks cannot take rank 1 of 2 (a unique id serves one "
                       "communicator, each rank once)"));
  EXPECT_THAT(api.CommInitRank(2, id, 2, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: rank 2 is not in [0, nranks) for "
                       "nranks 2"));
  NcclUniqueId forged;
  EXPECT_THAT(api.CommInitRank(2, forged, 0, 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: the unique id was not made by "
                       "ncclGetUniqueId in this process"));
  EXPECT_OK(api.CommDestroy(zero));
  EXPECT_OK(api.CommDestroy(one));
}

TEST(HostNcclApiTest, SendsMatchReceivesPerPeerInPostingOrder) {
  TwoRanks t;
  std::vector<uint8_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<uint8_t> ra(4, 0), rb(8, 0);
  ASSERT_OK(t.api.GroupStart());
  ASSERT_OK(t.api.Send(a.data(), 4, kUint8, 1, t.zero, t.s0));
  ASSERT_OK(t.api.Send(b.data(), 8, kUint8, 1, t.zero, t.s0));
  ASSERT_OK(t.api.GroupEnd());
  EXPECT_FALSE(t.api.StreamIdle(t.s0));  // posted, no receive yet
  ASSERT_OK(t.api.GroupStart());
  ASSERT_OK(t.api.Recv(ra.data(), 4, kUint8, 0, t.one, t.s1));
  EXPECT_EQ(ra, std::vector<uint8_t>(4, 0));  // queued until GroupEnd
  // The same bytes as two 4-byte elements: NCCL matches bytes.
  ASSERT_OK(t.api.Recv(rb.data(), 2, NcclDataType::kUint32, 0, t.one, t.s1));
  ASSERT_OK(t.api.GroupEnd());
  EXPECT_TRUE(t.api.StreamIdle(t.s0));
  EXPECT_TRUE(t.api.StreamIdle(t.s1));
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  EXPECT_EQ(t.api.calls(),
            (std::vector<std::string>{
                "ncclGetUniqueId()",
                "ncclCommInitRankConfig(nranks=2, rank=0, device=0, "
                "blocking=0)",
                "ncclCommInitRankConfig(nranks=2, rank=1, device=0, "
                "blocking=0)",
                "ncclGroupStart()", "ncclSend(count=4, ncclUint8, peer=1)",
                "ncclSend(count=8, ncclUint8, peer=1)", "ncclGroupEnd()",
                "ncclGroupStart()", "ncclRecv(count=4, ncclUint8, peer=0)",
                "ncclRecv(count=2, ncclUint32, peer=0)", "ncclGroupEnd()"}));
}

// Refusals post nothing and name NCCL's result.
TEST(HostNcclApiTest, ArgumentsAreCheckedAsNcclDocumentsThem) {
  TwoRanks t;
  uint8_t byte = 0;
  EXPECT_THAT(t.api.Send(&byte, 1, kUint8, 2, t.zero, t.s0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: ncclSend: peer 2 is not in [0, "
                       "2)"));
  EXPECT_THAT(t.api.Recv(nullptr, 1, kUint8, 1, t.zero, t.s0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: ncclRecv: buffer is null"));
  EXPECT_THAT(
      t.api.Send(&byte, 1, static_cast<NcclDataType>(42), 1, t.zero, t.s0),
      StatusIs(StatusCode::kInvalidArgument,
               "ncclInvalidArgument: ncclSend: invalid datatype 42"));
  EXPECT_THAT(t.api.Send(&byte, 1, kUint8, 1, 999999, t.s0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: ncclSend: comm 999999 is not a "
                       "communicator (destroyed, aborted or never made)"));
  EXPECT_THAT(t.api.Send(&byte, 1, kUint8, 1, t.zero, 999999),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: ncclSend: stream 999999 is not a "
                       "stream"));
  EXPECT_THAT(t.api.GroupEnd(),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidUsage: ncclGroupEnd without "
                       "ncclGroupStart"));
  const NcclUniqueId id = Must(t.api.GetUniqueId());
  const CommHandle lonely = Must(t.api.CommInitRank(2, id, 0, 0));
  EXPECT_THAT(t.api.Send(&byte, 1, kUint8, 1, lonely, t.s0),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidUsage: ncclSend on a communicator still "
                       "initialising"));
  EXPECT_TRUE(t.api.StreamIdle(t.s0));  // nothing was posted
  EXPECT_OK(t.api.CommAbort(lonely));
}

// A matched pair moving different bytes is an asynchronous error of both
// communicators, and never completes.
TEST(HostNcclApiTest, AMatchOfDifferentSizesIsAnAsynchronousError) {
  TwoRanks t;
  std::vector<uint8_t> out(8, 1), in(4, 0);
  ASSERT_OK(t.api.Send(out.data(), 8, kUint8, 1, t.zero, t.s0));
  ASSERT_OK(t.api.Recv(in.data(), 4, kUint8, 0, t.one, t.s1));
  const std::string why =
      "ncclInvalidUsage: rank 0 sent 8 bytes to rank 1, which posted a "
      "receive of 4 bytes";
  EXPECT_THAT(t.api.CommGetAsyncError(t.zero),
              StatusIs(StatusCode::kInternal, why));
  EXPECT_THAT(t.api.CommGetAsyncError(t.one),
              StatusIs(StatusCode::kInternal, why));
  EXPECT_EQ(in, std::vector<uint8_t>(4, 0));
  EXPECT_FALSE(t.api.StreamIdle(t.s1));
  EXPECT_OK(t.api.CommAbort(t.zero));
  EXPECT_OK(t.api.CommAbort(t.one));
  EXPECT_TRUE(t.api.StreamIdle(t.s0));
  EXPECT_TRUE(t.api.StreamIdle(t.s1));
}

// A receive whose sender never sends stays posted; destroying its
// communicator is refused, aborting it drops the work.
TEST(HostNcclApiTest, AbortDropsPostedWorkAndDestroyRefusesIt) {
  TwoRanks t;
  std::vector<uint8_t> in(4, 0);
  ASSERT_OK(t.api.Recv(in.data(), 4, kUint8, 0, t.one, t.s1));
  EXPECT_FALSE(t.api.StreamIdle(t.s1));
  EXPECT_THAT(t.api.CommDestroy(t.one),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidUsage: ncclCommDestroy of a communicator "
                       "with work in flight (ncclCommAbort drops it)"));
  EXPECT_OK(t.api.CommAbort(t.one));
  EXPECT_TRUE(t.api.StreamIdle(t.s1));
  EXPECT_THAT(t.api.CommGetAsyncError(t.one),
              StatusIs(StatusCode::kInvalidArgument,
                       "ncclInvalidArgument: ncclCommGetAsyncError: comm " +
                           std::to_string(t.one) +
                           " is not a communicator (destroyed, aborted or "
                           "never made)"));
  EXPECT_OK(t.api.CommDestroy(t.zero));
}

}  // namespace
}  // namespace reshard::nccl
