// The self-test's check of a converting reshard (--convert): targets of
// tensors that do not convert hold the pattern itself; those that convert
// hold the pattern converted, computed here independently of the path
// under test: each converting tensor filled whole with the source's
// pattern and converted whole (util/float_convert.h), then every target
// fragment compared with its box of it. So any target split is checked,
// whichever side converted.

#ifndef RESHARD_SELFTEST_CONVERTED_PATTERN_H_
#define RESHARD_SELFTEST_CONVERTED_PATTERN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/conversion.h"
#include "selftest/host_buffers.h"

namespace reshard::internal {

class ConvertedPatternCheck {
 public:
  // The check of `targets` (this process's target buffers) for a reshard
  // of `source` into `target` converting with blocks of `block`. A dtype
  // pair with no rule is InvalidArgument naming the tensor.
  static Result<std::unique_ptr<ConvertedPatternCheck>> Make(
      const WeightPlacementManifest& source,
      const WeightPlacementManifest& target, const Fp8Block& block,
      const HostBuffers& targets);

  // "" when every target byte is the pattern of `generation` (tensor
  // numbers from `tensors`, the source's) converted; else the first
  // mismatch (tensor, fragment, byte).
  std::string Verify(
      const std::unordered_map<std::string_view, uint64_t>& tensors,
      uint64_t generation) const;

 private:
  // A target tensor that converts, and its scale tensor (quantizing: the
  // target's, produced; dequantizing: the source's, read).
  struct Converting {
    const TensorDescriptor* source = nullptr;
    const TensorDescriptor* target = nullptr;
    const TensorDescriptor* scale = nullptr;
    bool quantize = false, dequantize = false;
  };
  ConvertedPatternCheck(const WeightPlacementManifest& source,
                        const WeightPlacementManifest& target,
                        const Fp8Block& block)
      : source_(source), target_(target), block_(block) {}
  // The whole target tensor (and quantizing, its scales) converted from
  // the pattern of `generation`.
  void Expect(const Converting& c,
              const std::unordered_map<std::string_view, uint64_t>& tensors,
              uint64_t generation, std::vector<uint8_t>* out,
              std::vector<uint8_t>* scales) const;

  WeightPlacementManifest source_, target_;
  Fp8Block block_;
  std::map<std::string, Converting, std::less<>> converting_;  // by tensor
  // Produced scale tensor -> its weight.
  std::map<std::string, std::string, std::less<>> produced_;
  HostBuffers plain_;  // the targets that do not convert
  // The converting targets: tensor -> (fragment, memory).
  std::multimap<std::string, std::pair<const PlacementFragment*, uint8_t*>,
                std::less<>>
      converted_;
};

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_CONVERTED_PATTERN_H_
