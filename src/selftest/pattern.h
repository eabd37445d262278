// The self-test pattern: every source element gets bytes derived from its
// tensor and global element index, so that any target byte can be checked
// without the source.

#ifndef RESHARD_SELFTEST_PATTERN_H_
#define RESHARD_SELFTEST_PATTERN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "reshard/placement.h"
#include "selftest/host_buffers.h"

namespace reshard::internal {

// Tensor index in `m`'s sorted tensor order (the pattern's tensor number).
std::unordered_map<std::string_view, uint64_t> TensorIndex(
    const WeightPlacementManifest& m);

using PatternProgress = std::function<void(uint64_t done, uint64_t total)>;

// Fills every fragment of `m` that has a buffer in `buffers`. A non-zero
// `generation` gives another pattern (standing sessions: a region skipped
// in an update keeps the previous generation's bytes and is caught). With
// `change_fraction` below 1, generations from 2 on change only about that
// fraction of the elements (deterministically; SelfTestElementGeneration),
// the others keep the pattern of the generation that last changed them.
void FillPattern(const WeightPlacementManifest& m,
                 const std::unordered_map<std::string_view, uint64_t>& tensors,
                 const HostBuffers& buffers,
                 const PatternProgress& progress = nullptr,
                 uint64_t generation = 0, double change_fraction = 1.0);

// Checks every byte of every fragment of `m` that has a buffer; returns ""
// or the first mismatch (tensor, fragment, global element, byte).
std::string VerifyPattern(
    const WeightPlacementManifest& m,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& buffers, const PatternProgress& progress = nullptr,
    uint64_t generation = 0, double change_fraction = 1.0);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_PATTERN_H_
