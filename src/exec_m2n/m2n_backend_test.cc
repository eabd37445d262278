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

// M2nUsable says why not in one line, and a backend is then refused with
// the same status; here the plugin is absent, or present but cannot load
// (no driver) or run (an older NCCL).
TEST(M2nBackendTest, UsableSaysWhyNot) {
  const Status usable = M2nUsable();
  if (!M2nBuilt()) {
    EXPECT_THAT(usable,
                StatusIs(StatusCode::kUnavailable,
                         "this build has no NCCL M2N backend (configure with "
                         "the M2N wheel installed: cmake/m2n.cmake)"));
  }
  if (usable.ok()) GTEST_SKIP() << "this machine runs NCCL M2N";
  EXPECT_EQ(usable.code(), StatusCode::kUnavailable);
  const std::string why(usable.message());
  EXPECT_TRUE(why.rfind("this build has no NCCL M2N backend", 0) == 0 ||
              why.rfind("cannot load the NCCL M2N backend: ", 0) == 0 ||
              why.rfind("NCCL M2N needs NCCL 2.30.5 or newer", 0) == 0)
      << why;
  if (why.rfind("NCCL M2N needs", 0) != 0) {
    EXPECT_THAT(M2nBackend::MakeSingleRank(0),
                StatusIs(StatusCode::kUnavailable, why));
  }
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
