// DeviceRegions (live/device_regions.h) over the host emulation of the
// device API: staged hashes equal the host hashes of the same bytes
// whatever the staging bound (pieces of whole loops, of rows, of bytes),
// same-rank copies device to device, host to device and device to host
// land byte for byte as the host copy does, and the fault injection flips
// one device byte.
#include "live/device_regions.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <vector>

#include "bind/row_walker.h"
#include "exec_cuda/host_device_api.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::live_internal {
namespace {

using ::reshard::testing::Must;

constexpr size_t kBytes = 4096;

uint8_t Pattern(size_t i) { return static_cast<uint8_t>(i * 31 + 7); }

uint64_t At(const void* p) { return reinterpret_cast<uint64_t>(p); }

// One emulated device allocation of the pattern and its host twin.
struct Twin {
  explicit Twin(cuda::HostDeviceApi& api)
      : device(static_cast<uint8_t*>(Must(api.Malloc(0, kBytes)))),
        host(kBytes) {
    for (size_t i = 0; i < kBytes; ++i) device[i] = host[i] = Pattern(i);
  }
  uint8_t* device;
  std::vector<uint8_t> host;
};

uint64_t HostHash(const BoundRegion& r, RegionSide side) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(
      XXH3_createState(), &XXH3_freeState);
  return HashRegion(r, side, state.get());
}

// 720 bytes: 3 slices of 6 rows of 40 bytes, strided on both sides.
BoundRegion Strided(uint64_t source, uint64_t target, uint32_t index) {
  return {source + 16, target + 8, 40, {{3, 1200, 250}, {6, 150, 41}},
          720,         index};
}

TEST(DeviceRegionsTest, StagedHashesEqualHostHashesWhateverTheBound) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  Twin a(*api), b(*api);
  // Region 0 reads device memory on its source side, region 1 on its
  // target side; their host twins read the same bytes.
  const std::vector<BoundRegion> regions = {
      Strided(At(a.device), At(b.host.data()), 0),
      Strided(At(a.host.data()), At(b.device), 1)};
  const BoundRegion twin0 = Strided(At(a.host.data()), 0, 0);
  const BoundRegion twin1 = Strided(0, At(b.host.data()), 1);
  uint64_t staged = 0;
  for (uint64_t bound : {uint64_t{7}, uint64_t{40}, uint64_t{100},
                         uint64_t{240}, uint64_t{1} << 20}) {
    SCOPED_TRACE(bound);
    DeviceRegions device("s", api, bound);
    ASSERT_OK(device.Classify(regions));
    EXPECT_TRUE(device.OnDevice(regions[0], RegionSide::kSource));
    EXPECT_FALSE(device.OnDevice(regions[0], RegionSide::kTarget));
    EXPECT_FALSE(device.OnDevice(regions[1], RegionSide::kSource));
    EXPECT_TRUE(device.OnDevice(regions[1], RegionSide::kTarget));
    EXPECT_EQ(Must(device.Hash(regions[0], RegionSide::kSource)),
              HostHash(twin0, RegionSide::kSource));
    EXPECT_EQ(Must(device.Hash(regions[1], RegionSide::kTarget)),
              HostHash(twin1, RegionSide::kTarget));
    EXPECT_EQ(device.staged_bytes(), 2 * 720u);
    EXPECT_EQ(device.staging_buffer_bytes(), std::min<uint64_t>(bound, 720));
    staged += 2 * 720;
  }
  // Every staged byte crossed the emulation device to host, once.
  EXPECT_EQ(api->counters().bytes_copied, staged);
}

// Device to device, host to device and device to host in one Copy, each
// as the host copy of the same region; a copy lands in no other byte.
TEST(DeviceRegionsTest, CopiesDeviceAndMixedRegionsByteForByte) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  Twin source(*api);
  auto* target = static_cast<uint8_t*>(Must(api->Malloc(0, kBytes)));
  std::vector<uint8_t> host_target(kBytes, 0xEE);
  std::memset(target, 0xEE, kBytes);
  const std::vector<BoundRegion> regions = {
      Strided(At(source.device), At(target), 0),  // D2D
      {At(source.host.data()) + 3000, At(target) + 3000, 500, {}, 500, 1},
      {At(source.device) + 3600,
       At(host_target.data()) + 3600,
       24,
       {{10, 40, 32}},
       240,
       2}};  // D2H
  // The expected bytes: the same regions copied on the host twins.
  std::vector<uint8_t> expected(kBytes, 0xEE);
  for (const BoundRegion& r : regions) {
    BoundRegion twin = r;
    twin.source_address =
        At(source.host.data()) +
        (r.source_address -
         (r.region == 1 ? At(source.host.data()) : At(source.device)));
    twin.target_address =
        At(expected.data()) +
        (r.target_address -
         (r.region == 2 ? At(host_target.data()) : At(target)));
    internal::CopyRegionSegments(twin, 0, internal::RowCount(twin));
  }
  DeviceRegions device("s", api, 1 << 20);
  ASSERT_OK(device.Classify(regions));
  EXPECT_OK(device.Copy({&regions[0], &regions[1], &regions[2]}));
  // Regions 0 and 1 wrote the device target, region 2 the host one.
  for (size_t i = 0; i < kBytes; ++i) {
    const uint8_t want = expected[i];
    const bool host_side = i >= 3600 && i < 3600 + 10 * 32;
    ASSERT_EQ(host_side ? host_target[i] : target[i], want) << i;
    if (!host_side) {
      ASSERT_EQ(host_target[i], 0xEE) << i;
    }
  }
  EXPECT_EQ(api->counters().bytes_copied, 720u + 500u + 240u);
  EXPECT_OK(api->Free(target));
}

TEST(DeviceRegionsTest, TheFaultFlipsOneDeviceByte) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  Twin t(*api);
  const std::vector<BoundRegion> regions = {
      {At(t.host.data()), At(t.device) + 100, 64, {}, 64, 0}};
  DeviceRegions device("s", api, 1 << 20);
  ASSERT_OK(device.Classify(regions));
  EXPECT_OK(device.FlipFirstTargetByte(regions[0], 0x5A));
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(t.device[i], i == 100 ? (Pattern(i) ^ 0x5A) : Pattern(i)) << i;
  }
}

}  // namespace
}  // namespace reshard::live_internal
