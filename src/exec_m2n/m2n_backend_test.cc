// The M2N backend where it cannot run: a build without the plugin refuses
// in one line; a build with it loads it on first use (on a machine
// without the driver, a refusal naming the load that failed).

#include "exec_m2n/m2n_backend.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/status_testing.h"

namespace reshard::m2n {
namespace {

using ::reshard::testing::StatusIs;

TEST(M2nBackendTest, WithoutThePluginRefusesInOneLine) {
  if (M2nBuilt()) GTEST_SKIP() << "this build has the plugin";
  EXPECT_EQ(M2nPluginPath(), "");
  EXPECT_THAT(M2nBackend::MakeSingleRank(0),
              StatusIs(StatusCode::kUnavailable,
                       "this build has no NCCL M2N backend (configure with "
                       "the M2N wheel installed: cmake/m2n.cmake)"));
}

TEST(M2nBackendTest, NullCommunicatorRefused) {
  EXPECT_THAT(M2nBackend::Make(nullptr),
              StatusIs(StatusCode::kInvalidArgument,
                       "M2nBackend::Make: null communicator"));
}

TEST(M2nBackendTest, BuiltPluginIsTheBuildsLibrary) {
  if (!M2nBuilt()) GTEST_SKIP() << "this build has no plugin";
  const std::string path = M2nPluginPath();
  EXPECT_EQ(path.substr(path.rfind('/') + 1), "libreshard_m2n.so");
}

}  // namespace
}  // namespace reshard::m2n
