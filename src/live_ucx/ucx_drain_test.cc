// A UCX worker destroyed while it holds messages no receive took (a
// peer's sends of an update this rank failed before receiving) drops
// them first: UCX then prints no "unexpected tag-receive descriptor ...
// was not matched" warning, which scripts reading reshard's output take
// for an error.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using Kind = ExchangeOp::Kind;

TEST(UcxDrainTest, UnreceivedMessagesAreDroppedWithoutAWarning) {
  // Small strided regions: eager messages, complete once sent.
  const auto source = testing::CubeLayout(2, 0, {2, 4, 8});
  const auto target = testing::CubeLayout(2, 1, {2, 4, 8});
  HostBuffers src = Must(AllocateHostBuffers(source, "source"));
  HostBuffers dst = Must(AllocateHostBuffers(target, "target"));
  FillPattern(source, TensorIndex(source), src);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto bound = Must(BoundTransferPlan::Bind(plan, source, src.bindings,
                                                  target, dst.bindings));
  std::unique_ptr<PeerExchange> zero = Must(MakePeerExchange("ucx", {0, {}}));
  std::unique_ptr<PeerExchange> one = Must(MakePeerExchange("ucx", {1, {}}));
  const std::string zero_at = Must(zero->Address());
  const std::string one_at = Must(one->Address());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Status zero_status, one_status;
  std::thread t0([&] {
    zero_status = zero->Connect(1, one_at, "rank 1");
    if (zero_status.ok()) {
      zero_status = zero->WireUp(deadline, [] { return Status::OK(); });
    }
    if (!zero_status.ok()) return;
    std::vector<ExchangeOp> ops;
    for (const BoundRegion& br : bound.regions()) {
      ops.push_back({&br, {}, 1, Kind::kSend});
    }
    ExchangeRunOptions o;
    o.session_tag = 7;
    o.deadline = deadline;
    zero_status = zero->Run(ops, o, nullptr);
  });
  one_status = one->Connect(0, zero_at, "rank 0");
  if (one_status.ok()) {
    one_status = one->WireUp(deadline, [] { return Status::OK(); });
  }
  t0.join();
  ASSERT_OK(zero_status);
  ASSERT_OK(one_status);
  // The messages arrive, unexpected: no receive is posted for them.
  for (int i = 0; i < 50; ++i) one->Progress(std::chrono::milliseconds(1));
  // UCX logs where its configuration says: stdout or stderr.
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  one.reset();
  zero.reset();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(err + out, "");
}

}  // namespace
}  // namespace reshard::internal
