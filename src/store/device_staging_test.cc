// CUDA fragments in store loads and uploads. On a machine without a CUDA
// device (or a build without CUDA) they are refused before anything is
// written, naming the fragment; over the host emulation of the device API
// (injected as WeightStoreOptions::device_api) the staged path uploads
// from device sources and loads into device targets, every byte checked
// against values derived from global element indices.
#include "store/device_staging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/fragment_staging.h"
#include "exec_cuda/host_device_api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/device_sides.h"
#include "testing/memory_object_store.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TpLayout;
using ::reshard::testing::WithBindingChanges;

// Why this machine has no CUDA executor (the test's premise).
std::string NoExecutorReason() {
  return QueryCuda().built
             ? "CUDA executor unavailable: no CUDA device on this machine"
             : "CUDA executor unavailable: this build has no CUDA backend "
               "(configure with -DRESHARD_CUDA=ON where nvcc is installed)";
}

std::vector<WeightRuntimeBindingManifest> OnDevice(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const std::string& device) {
  std::vector<WeightRuntimeBindingManifest> out;
  for (const auto& b : bindings) {
    out.push_back(Must(WithBindingChanges(b, {.device = device})));
  }
  return out;
}

std::string Refusal(const std::string& path, const std::string& side,
                    const std::string& fragment, const std::string& who,
                    const std::string& device) {
  return path + " executor cannot move cuda memory: " + side + " fragment " +
         fragment + " of participant " + who + " (device \"" + device +
         "\"); " + NoExecutorReason();
}

TEST(StoreDeviceStagingTest, WithoutACudaExecutorNothingIsWritten) {
  if (QueryCuda().devices > 0) {
    GTEST_SKIP() << "this machine has a CUDA device: nothing is refused";
  }
  auto backend = std::make_shared<testing::MemoryObjectStore>();
  WeightStore store = Must(WeightStore::Open(backend));
  const auto source = TpLayout(1, 2);
  HostBuffers src = Must(AllocateHostBuffers(source, "source"));
  const auto tensors = internal::TensorIndex(source);
  internal::FillPattern(source, tensors, src);
  const auto cuda_src = OnDevice(src.bindings, "cuda:1");
  const auto& b0 = cuda_src[0];
  const std::string first = b0.fragments()[0].placement_fragment_id();
  const std::string upload_refusal =
      Refusal("store upload", "source", first, b0.participant_id(), "cuda:1");

  EXPECT_THAT(store.PrepareUpload(source, cuda_src),
              StatusIs(StatusCode::kFailedPrecondition, upload_refusal));
  ShareUploadOptions share;
  share.upload_id = "attempt-1";
  EXPECT_THAT(store.UploadShare(source, cuda_src, share),
              StatusIs(StatusCode::kFailedPrecondition, upload_refusal));
  EXPECT_TRUE(Must(backend->List("")).empty());

  // A plan prepared from host bindings, uploaded from CUDA ones.
  const auto plan = Must(store.PrepareUpload(source, src.bindings));
  const auto before_upload = Must(backend->List(""));
  EXPECT_THAT(store.Upload(plan, source, b0),
              StatusIs(StatusCode::kFailedPrecondition, upload_refusal));
  EXPECT_EQ(Must(backend->List("")), before_upload);

  std::vector<UploadReceipt> receipts;
  for (const auto& b : src.bindings) {
    auto r = Must(store.Upload(plan, source, b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  ASSERT_OK(store.Commit(plan, receipts));
  const auto committed = Must(backend->List(""));

  const auto target = TpLayout(1, 4);
  HostBuffers dst = Must(AllocateHostBuffers(target, "target"));
  for (const auto& [id, p] : dst.data) {
    std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
  }
  const auto cuda_dst = OnDevice(dst.bindings, "cuda");
  EXPECT_THAT(
      store.Load(plan.manifest(), target, cuda_dst),
      StatusIs(StatusCode::kFailedPrecondition,
               Refusal("store load", "target",
                       cuda_dst[0].fragments()[0].placement_fragment_id(),
                       cuda_dst[0].participant_id(), "cuda")));
  // No lease or other record was written, the revision still verifies and
  // no target byte moved.
  EXPECT_EQ(Must(backend->List("")), committed);
  EXPECT_OK(store.Verify(plan.manifest().manifest_key()).status());
  for (const auto& [id, p] : dst.data) {
    for (uint64_t i = 0; i < target.FindFragment(id)->nbytes(); ++i) {
      ASSERT_EQ(p[i], 0xD7) << id << " byte " << i;
    }
  }
}

TEST(StoreDeviceStagingTest, UploadsFromAndLoadsIntoEmulatedDevices) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 2});
  auto backend = std::make_shared<testing::MemoryObjectStore>();
  WeightStoreOptions options;
  options.device_api = api;
  options.device_staging_bytes = 1024;  // several groups of tensors
  WeightStore store = Must(WeightStore::Open(backend, options));

  // Sources on device 0, the pattern put there through the host.
  const auto source = TpLayout(1, 2);
  const auto src_tensors = internal::TensorIndex(source);
  HostBuffers pattern = Must(AllocateHostBuffers(source, "source"));
  internal::FillPattern(source, src_tensors, pattern);
  testing::DeviceSide src(*api, source, 0, "source");
  for (const PlacementFragment* f : source.fragments()) {
    const std::string& id = f->placement_fragment_id();
    std::memcpy(src.data.at(id), pattern.data.at(id), f->nbytes());
  }
  const auto plan = Must(store.PrepareUpload(source, src.bindings));
  std::vector<UploadReceipt> receipts;
  for (const auto& b : src.bindings) {
    auto r = Must(store.Upload(plan, source, b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  ASSERT_OK(store.Commit(plan, receipts));
  const uint64_t uploaded = api->counters().bytes_copied;
  uint64_t model_bytes = 0;  // each tensor's bytes, uploaded once
  for (const auto& t : source.tensors()) {
    model_bytes += t.num_elements() * static_cast<uint64_t>(t.itemsize());
  }
  EXPECT_EQ(uploaded, model_bytes);

  // Targets DP2 x TP4: replica 0 on device 1, replica 1 in host memory.
  const auto target = TpLayout(2, 4);
  const auto dst_tensors = internal::TensorIndex(target);
  testing::DeviceSide device_dst(*api, target, 1, "target");
  HostBuffers host_dst = Must(AllocateHostBuffers(target, "target"));
  std::vector<WeightRuntimeBindingManifest> bindings;
  uint64_t device_bytes = 0;
  for (size_t i = 0; i < device_dst.bindings.size(); ++i) {
    const auto& d = device_dst.bindings[i];
    const bool on_device = d.participant_id().find("-d0-") != std::string::npos;
    bindings.push_back(on_device ? d : host_dst.bindings[i]);
    ASSERT_EQ(host_dst.bindings[i].participant_id(), d.participant_id());
    if (!on_device) continue;
    for (const auto& f : d.fragments()) device_bytes += f.nbytes();
  }
  ASSERT_GT(device_bytes, 0u);
  const LoadReport report = Must(store.Load(plan.manifest(), target, bindings));
  uint64_t target_bytes = 0;
  for (const PlacementFragment* f : target.fragments()) {
    target_bytes += f->nbytes();
  }
  EXPECT_EQ(report.bytes, target_bytes);
  EXPECT_EQ(api->counters().bytes_copied - uploaded, device_bytes);

  // Every byte: the device replica copied out, the host replica as is.
  HostBuffers check = Must(AllocateHostBuffers(target, "check"));
  for (const WeightPlacementPart& part : target.parts()) {
    const bool d0 = part.participant_id().find("-d0-") != std::string::npos;
    for (const PlacementFragment& f : part.fragments()) {
      const std::string& id = f.placement_fragment_id();
      const uint8_t* from = d0 ? device_dst.data.at(id) : host_dst.data.at(id);
      std::memcpy(check.data.at(id), from, f.nbytes());
    }
  }
  EXPECT_EQ(internal::VerifyPattern(target, dst_tensors, check), "");
}

// The staging copies of exec_cuda/fragment_staging.h on strided device
// views (a row pitch wider than the rows; a transposed view), both ways:
// every element where its strides put it, the bytes between untouched.
TEST(FragmentStagingTest, StridedDeviceViewsBothWays) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 2});
  cuda::FragmentStaging staging(api);
  struct View {
    Dims strides;
    uint64_t storage;
  };
  // [4, 6] elements of 2 bytes: rows 32 bytes apart; column-major.
  for (const View& v : {View{{32, 2}, 4 * 32}, View{{2, 8}, 4 * 6 * 2}}) {
    SCOPED_TRACE(v.strides[0]);
    auto* device = static_cast<uint8_t*>(Must(api->Malloc(1, v.storage)));
    RuntimeBindingFragmentSpec spec;
    spec.placement_fragment_id = "w/0";
    spec.runtime_fragment_id = "w/0";
    spec.address = reinterpret_cast<uintptr_t>(device);
    spec.nbytes = 4 * 6 * 2;
    spec.worker_id = "worker";
    spec.endpoint = "local";
    spec.device = "cuda:1";
    spec.itemsize = 2;
    spec.local_shape = {4, 6};
    spec.strides_bytes = v.strides;
    spec.storage_address = spec.address;
    spec.storage_nbytes = v.storage;
    const auto f = Must(RuntimeBindingFragment::Make(spec));
    std::vector<uint8_t> host(spec.nbytes);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i);
    ASSERT_OK(staging.ToFragment(host.data(), f));
    std::vector<bool> covered(v.storage, false);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t c = 0; c < 6; ++c) {
        const uint64_t at = r * v.strides[0] + c * v.strides[1];
        const uint64_t from = (r * 6 + c) * 2;
        EXPECT_EQ(device[at], host[from]) << r << "," << c;
        EXPECT_EQ(device[at + 1], host[from + 1]) << r << "," << c;
        covered[at] = covered[at + 1] = true;
      }
    }
    for (uint64_t i = 0; i < v.storage; ++i) {
      if (!covered[i]) {
        EXPECT_EQ(device[i], 0xDB) << "byte " << i;
      }
    }
    std::vector<uint8_t> back(spec.nbytes, 0);
    ASSERT_OK(staging.FromFragment(f, back.data()));
    EXPECT_EQ(back, host);
    ASSERT_OK(api->Free(device));
  }
  // A fragment said to be on a device whose memory is not.
  std::vector<uint8_t> plain(8);
  RuntimeBindingFragmentSpec spec;
  spec.placement_fragment_id = "w/1";
  spec.runtime_fragment_id = "w/1";
  spec.address = reinterpret_cast<uintptr_t>(plain.data());
  spec.nbytes = 8;
  spec.worker_id = "worker";
  spec.endpoint = "local";
  spec.device = "cuda:0";
  spec.itemsize = 1;
  spec.local_shape = {8};
  spec.strides_bytes = {1};
  spec.storage_address = spec.address;
  spec.storage_nbytes = 8;
  EXPECT_THAT(staging.FromFragment(Must(RuntimeBindingFragment::Make(spec)),
                                   plain.data()),
              StatusIs(StatusCode::kInvalidArgument,
                       "fragment w/1 (device \"cuda:0\") is not in CUDA "
                       "device memory"));
}

}  // namespace
}  // namespace reshard
