// Heartbeats through a real directory rendezvous: the counter advances and
// replaces its record, a stopped rank is found silent after the timeout
// (not before), exempt and never-seen ranks are not judged, and a forged
// heartbeat key is an error naming it.

#include "live/heartbeat.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "reshard/backends/fs_store.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::live_internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::TempDir;
using std::chrono::milliseconds;

// Waits (at most 5 s) until `pred` holds.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return pred();
}

TEST(HeartbeatTest, CounterAdvancesAndKeepsOneRecord) {
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  auto beat = Must(Heartbeat::Start(*store, "s/", 3, milliseconds(5)));
  EXPECT_EQ(Must(store->List("s/alive/3/")).size(), 1u);
  ASSERT_TRUE(Eventually([&] { return beat->beats() >= 4; }));
  beat->Stop(/*remove=*/false);
  const uint64_t last = beat->beats();
  const auto keys = Must(store->List("s/alive/"));
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0], "s/alive/3/" + std::to_string(last));
  beat->Stop(/*remove=*/true);
  EXPECT_TRUE(Must(store->List("s/alive/")).empty());
}

TEST(HeartbeatTest, StoppedRankIsSilentAfterTheTimeoutOnly) {
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  auto one = Must(Heartbeat::Start(*store, "s/", 1, milliseconds(5)));
  auto two = Must(Heartbeat::Start(*store, "s/", 2, milliseconds(5)));
  // A timeout well above the interval: a loaded machine (the suites run in
  // parallel) may delay a 5 ms beat by tens of milliseconds.
  PeerWatch watch(*store, "s/", 0, 4, milliseconds(600));
  // Rank 3 never beats: it is never judged.
  ASSERT_EQ(Must(watch.FirstSilent(nullptr)), std::nullopt);
  std::this_thread::sleep_for(milliseconds(300));
  // The watch times a rank's silence from the look that last saw its count
  // change: this look, or a later one. So the timeout runs from here, which
  // may be a little before the stop below (measuring from the stop failed
  // by 0.1 ms under a sanitizer).
  const auto last_look = std::chrono::steady_clock::now();
  EXPECT_EQ(Must(watch.FirstSilent(nullptr)), std::nullopt);
  two->Stop(/*remove=*/false);
  std::optional<uint32_t> silent;
  ASSERT_TRUE(Eventually([&] {
    silent = Must(watch.FirstSilent(nullptr));
    return silent.has_value();
  }));
  const auto after = std::chrono::steady_clock::now() - last_look;
  EXPECT_EQ(*silent, 2u);
  EXPECT_GE(after, milliseconds(600));
  EXPECT_GE(watch.SilentMillis(2), 600);
  // Exempt: not reported; rank 1 still beats.
  EXPECT_EQ(Must(watch.FirstSilent([](uint32_t r) { return r == 2; })),
            std::nullopt);
  // A rank whose record is gone altogether stays silent.
  two->Stop(/*remove=*/true);
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(Must(watch.FirstSilent(nullptr)), std::optional<uint32_t>(2));
}

TEST(HeartbeatTest, ForgedKeysAreErrors) {
  for (const char* key : {"s/alive/9/1", "s/alive/1/x", "s/alive/01/2",
                          "s/alive/1/007", "s/alive/x/1"}) {
    SCOPED_TRACE(key);
    TempDir dir;
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    ASSERT_OK(store->Put(key, "{}"));
    PeerWatch watch(*store, "s/", 0, 4, milliseconds(100));
    EXPECT_EQ(watch.FirstSilent(nullptr).status().ToString(),
              "InvalidArgument: live session heartbeat " + std::string(key) +
                  " names no rank of 4 with a counter");
  }
}

}  // namespace
}  // namespace reshard::live_internal
