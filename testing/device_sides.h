// Test helper for the CUDA executor's tests: one side of a reshard (every
// fragment of a placement) in memory of a device, allocated through a
// DeviceApi (the CUDA runtime's or the host emulation's), or in host
// memory, and bound per participant as "cuda:<device>" or "cpu".
#ifndef RESHARD_TESTING_DEVICE_SIDES_H_
#define RESHARD_TESTING_DEVICE_SIDES_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec_cuda/device_api.h"
#include "reshard/api.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::testing {

inline constexpr int kHostMemory = -1;

struct DeviceSide {
  // `device` kHostMemory: host memory (vectors); otherwise api.Malloc.
  DeviceSide(cuda::DeviceApi& api, const WeightPlacementManifest& m, int device,
             const std::string& instance)
      : api(api) {
    std::map<std::string, std::map<std::string, void*>> by_participant;
    for (const WeightPlacementPart& part : m.parts()) {
      for (const PlacementFragment& f : part.fragments()) {
        void* p = nullptr;
        if (device == kHostMemory) {
          host.emplace_back(f.nbytes() + 1, 0);
          p = host.back().data();
        } else {
          p = Must(api.Malloc(device, f.nbytes()));
          device_ptrs.push_back(p);
        }
        data[f.placement_fragment_id()] = static_cast<uint8_t*>(p);
        by_participant[part.participant_id()][f.placement_fragment_id()] = p;
      }
    }
    BufferBindingOptions o;
    o.instance_id = instance;
    o.device = device == kHostMemory ? "cpu" : "cuda:" + std::to_string(device);
    for (const auto& [participant, buffers] : by_participant) {
      bindings.push_back(Must(BindBuffers(m, participant, buffers, o)));
    }
  }
  ~DeviceSide() {
    for (void* p : device_ptrs) EXPECT_OK(api.Free(p));
  }
  DeviceSide(const DeviceSide&) = delete;
  DeviceSide& operator=(const DeviceSide&) = delete;

  cuda::DeviceApi& api;
  std::vector<std::vector<uint8_t>> host;
  std::vector<void*> device_ptrs;
  std::map<std::string, uint8_t*> data;  // by placement fragment id
  std::vector<WeightRuntimeBindingManifest> bindings;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_DEVICE_SIDES_H_
