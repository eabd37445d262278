#include "selftest/converted_pattern.h"

#include <cstring>

#include "selftest/pattern.h"
#include "selftest/selftest.h"
#include "util/float_convert.h"

namespace reshard::internal {
namespace {

std::string ScaleIdOf(const std::string& weight) {
  constexpr std::string_view kWeight = "weight";
  if (!std::string_view(weight).ends_with(kWeight)) return {};
  return weight.substr(0, weight.size() - kWeight.size()) + "weight_scale_inv";
}

uint64_t Elements(const Dims& shape) {
  uint64_t n = 1;
  for (int64_t e : shape) n *= static_cast<uint64_t>(e);
  return n;
}

// The whole tensor `t` (number `ti` in the pattern) of `generation`.
std::vector<uint8_t> WholePattern(const TensorDescriptor& t, uint64_t ti,
                                  uint64_t generation) {
  const uint64_t item = static_cast<uint64_t>(t.itemsize());
  std::vector<uint8_t> out(Elements(t.global_shape()) * item);
  uint8_t* p = out.data();
  const uint64_t tensor = ti + (generation << 32);
  for (uint64_t e = 0; e < out.size() / item; ++e, p += item) {
    SelfTestPatternElement(tensor, e, item, p);
  }
  return out;
}

// The first byte where fragment `f` (row-major, at `actual`) differs from
// its box of the whole tensor `whole`; "" when none.
std::string CompareBox(const PlacementFragment& f, const Dims& global,
                       uint64_t item, const uint8_t* actual,
                       const std::vector<uint8_t>& whole) {
  const Dims& o = f.global_offset();
  const Dims& n = f.local_shape();
  const size_t dims = n.size();
  const uint64_t rows = dims == 0 ? 1 : Elements(n) / n.back();
  const uint64_t row_bytes = (dims == 0 ? 1 : n.back()) * item;
  for (uint64_t r = 0; r < rows; ++r) {
    // Global element index of the row's first element.
    Dims index(dims, 0);
    uint64_t rest = r, at = 0, stride = 1;
    for (size_t d = dims; d-- > 1;) {
      index[d - 1] =
          static_cast<int64_t>(rest % static_cast<uint64_t>(n[d - 1]));
      rest /= static_cast<uint64_t>(n[d - 1]);
    }
    for (size_t d = dims; d-- > 0;) {
      at += static_cast<uint64_t>(o[d] + index[d]) * stride;
      stride *= static_cast<uint64_t>(global[d]);
    }
    const uint8_t* want = whole.data() + at * item;
    const uint8_t* got = actual + r * row_bytes;
    if (std::memcmp(want, got, row_bytes) == 0) continue;
    for (uint64_t b = 0; b < row_bytes; ++b) {
      if (want[b] == got[b]) continue;
      return "tensor " + f.tensor_id() + ", fragment " +
             f.placement_fragment_id() + ", byte " +
             std::to_string(r * row_bytes + b) + ": expected " +
             std::to_string(want[b]) + " (the pattern converted), got " +
             std::to_string(got[b]);
    }
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<ConvertedPatternCheck>> ConvertedPatternCheck::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const Fp8Block& block,
    const HostBuffers& targets) {
  std::unique_ptr<ConvertedPatternCheck> check(
      new ConvertedPatternCheck(source, target, block));
  for (const TensorDescriptor& t : check->target_.tensors()) {
    const TensorDescriptor* s = check->source_.FindTensor(t.tensor_id());
    if (s == nullptr || s->dtype() == t.dtype()) continue;
    Converting c{s, &t};
    const auto from = FloatTypeOf(s->dtype());
    const auto to = FloatTypeOf(t.dtype());
    if (!from.has_value() || !to.has_value() || *from == *to) {
      return Status::InvalidArgument("cannot convert tensor " + t.tensor_id() +
                                     ": " + s->dtype() + " to " + t.dtype());
    }
    c.quantize = *to == FloatType::kFloat8E4M3;
    c.dequantize = *from == FloatType::kFloat8E4M3;
    if (c.quantize || c.dequantize) {
      const std::string scale = ScaleIdOf(t.tensor_id());
      c.scale =
          (c.quantize ? check->target_ : check->source_).FindTensor(scale);
      if (c.scale == nullptr || t.ndim() != 2) {
        return Status::InvalidArgument("cannot convert tensor " +
                                       t.tensor_id() + ": no scale tensor " +
                                       scale);
      }
      if (c.quantize) check->produced_[scale] = t.tensor_id();
    }
    check->converting_[t.tensor_id()] = c;
  }
  for (const PlacementFragment* f : check->target_.fragments()) {
    auto it = targets.data.find(f->placement_fragment_id());
    if (it == targets.data.end()) continue;
    if (check->converting_.count(f->tensor_id()) ||
        check->produced_.count(f->tensor_id())) {
      check->converted_.emplace(f->tensor_id(), std::make_pair(f, it->second));
    } else {
      check->plain_.data[f->placement_fragment_id()] = it->second;
    }
  }
  return check;
}

void ConvertedPatternCheck::Expect(
    const Converting& c,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    uint64_t generation, std::vector<uint8_t>* out,
    std::vector<uint8_t>* scales) const {
  const std::vector<uint8_t> in =
      WholePattern(*c.source, tensors.at(c.source->tensor_id()), generation);
  const FloatType from = *FloatTypeOf(c.source->dtype());
  const FloatType to = *FloatTypeOf(c.target->dtype());
  const Dims& g = c.target->global_shape();
  out->assign(Elements(g) * SizeOf(to), 0);
  if (!c.quantize && !c.dequantize) {
    CastElements(from, in.data(), to, out->data(), Elements(g));
    return;
  }
  const MatrixView m{g[0], g[1], g[1]};
  const int64_t scale_cols = c.scale->global_shape()[1];
  std::vector<float> s(Elements(c.scale->global_shape()));
  if (c.quantize) {
    QuantizeE4m3Blocks(from, in.data(), m, block_.rows, block_.cols,
                       out->data(), g[1], s.data(), scale_cols);
    scales->assign(s.size() * sizeof(float), 0);
    std::memcpy(scales->data(), s.data(), scales->size());
    return;
  }
  const std::vector<uint8_t> read =
      WholePattern(*c.scale, tensors.at(c.scale->tensor_id()), generation);
  CastElements(*FloatTypeOf(c.scale->dtype()), read.data(), FloatType::kFloat32,
               s.data(), s.size());
  DequantizeE4m3Blocks(in.data(), m, block_.rows, block_.cols, s.data(),
                       scale_cols, to, out->data(), g[1]);
}

std::string ConvertedPatternCheck::Verify(
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    uint64_t generation) const {
  for (const auto& [id, c] : converting_) {
    auto [lo, hi] = converted_.equal_range(id);
    const std::string scale = c.quantize ? c.scale->tensor_id() : "";
    auto [slo, shi] = converted_.equal_range(scale);
    if (lo == hi && (scale.empty() || slo == shi)) continue;
    std::vector<uint8_t> whole, scales;
    Expect(c, tensors, generation, &whole, &scales);
    const uint64_t item = SizeOf(*FloatTypeOf(c.target->dtype()));
    for (auto it = lo; it != hi; ++it) {
      std::string m = CompareBox(*it->second.first, c.target->global_shape(),
                                 item, it->second.second, whole);
      if (!m.empty()) return m;
    }
    for (auto it = slo; !scale.empty() && it != shi; ++it) {
      std::string m = CompareBox(*it->second.first, c.scale->global_shape(),
                                 sizeof(float), it->second.second, scales);
      if (!m.empty()) return m;
    }
  }
  return VerifyPattern(target_, tensors, plain_, nullptr, generation);
}

}  // namespace reshard::internal
