// Pieces the architectures' tensor lists share: typed reads of config.json
// fields and the list a model's tensors are appended to.

#ifndef RESHARD_HF_CONFIG_READER_H_
#define RESHARD_HF_CONFIG_READER_H_

#include <simdjson.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf/hf_config.h"
#include "util/json_reader.h"

namespace reshard::internal {

// Typed reads of config.json fields; messages name the field.
class ConfigReader {
 public:
  explicit ConfigReader(simdjson::dom::object obj) : obj_(obj) {}

  bool Has(std::string_view key) const {
    simdjson::dom::element e;
    return obj_.at_key(key).get(e) == simdjson::SUCCESS && !e.is_null();
  }
  Result<int64_t> Int(std::string_view key) const {
    simdjson::dom::element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) {
      return Status::InvalidArgument("config.json lacks " + std::string(key));
    }
    int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS || v < 0) {
      return Status::InvalidArgument("config.json: " + std::string(key) +
                                     " must be a non-negative integer");
    }
    return v;
  }
  Result<int64_t> Int(std::string_view key, int64_t fallback) const {
    if (!Has(key)) return fallback;
    return Int(key);
  }
  Result<bool> Bool(std::string_view key, bool fallback) const {
    if (!Has(key)) return fallback;
    bool v = false;
    if (obj_[key].get_bool().get(v) != simdjson::SUCCESS) {
      return Status::InvalidArgument("config.json: " + std::string(key) +
                                     " must be true or false");
    }
    return v;
  }
  Result<std::string> String(std::string_view key,
                             std::string_view fallback) const {
    if (!Has(key)) return std::string(fallback);
    std::string_view v;
    if (obj_[key].get_string().get(v) != simdjson::SUCCESS) {
      return Status::InvalidArgument("config.json: " + std::string(key) +
                                     " must be a string");
    }
    return std::string(v);
  }
  Result<std::vector<int64_t>> Ints(std::string_view key) const {
    if (!Has(key)) return std::vector<int64_t>{};
    JsonPath root;
    RESHARD_ASSIGN_OR_RETURN(Dims values,
                             ReadIntArray(obj_[key], root.Field(key)));
    return values.ToVector();
  }
  simdjson::dom::object object() const { return obj_; }

 private:
  simdjson::dom::object obj_;
};

// Appends the tensors of one model; `dtype` of the config.
class TensorList {
 public:
  explicit TensorList(const HfConfig& c)
      : c_(c), itemsize_(FindSafetensorsDtypeByPlacement(c.dtype)->itemsize) {}

  void Add(std::string name, Dims shape, HfShard shard,
           std::optional<int64_t> layer, bool quantized = false,
           std::optional<int64_t> expert = std::nullopt) {
    HfTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.dtype = c_.dtype;
    t.itemsize = itemsize_;
    t.shard = shard;
    t.linear = quantized;
    t.quantized = quantized && QuantizesLinear(c_, t.name);
    t.layer = layer;
    t.expert = expert;
    t.last_stage = layer && *layer >= c_.layers;
    out_.push_back(std::move(t));
  }
  // A tensor holding every routed expert, dim 0 the expert
  // (HfTensor::grouped_experts).
  void AddGrouped(std::string name, Dims shape, HfShard shard,
                  std::optional<int64_t> layer) {
    Add(std::move(name), std::move(shape), shard, layer);
    out_.back().grouped_experts = true;
  }
  // Splits the last tensor added over TP section by section.
  void Sections(std::vector<int64_t> sections) {
    out_.back().tp_sections = std::move(sections);
  }
  // Gives the last tensor added a dtype of its own (placement name).
  void SetDtype(const char* dtype) {
    out_.back().dtype = dtype;
    out_.back().itemsize = FindSafetensorsDtypeByPlacement(dtype)->itemsize;
  }
  std::vector<HfTensor>& out() { return out_; }

 private:
  const HfConfig& c_;
  int64_t itemsize_;
  std::vector<HfTensor> out_;
};

// gate/up (column) and down (row) projections of width `i` under prefix
// `p` (with their biases).
void AddMlp(const HfConfig& c, const std::string& p, int64_t i, int64_t l,
            TensorList* t, bool bias = false);

// Routed experts, one tensor per expert: `names` are the gate, up and
// down projection names.
void AddExperts(const HfConfig& c, const std::string& p,
                const std::array<const char*, 3>& names, int64_t l,
                TensorList* t);

// Every routed expert of a layer in two 3-D tensors, dim 0 the expert
// (transformers 5's fused form, `x` the experts' prefix): gate_up_proj
// [E, 2I, H], rows [gate | up] split over TP section by section;
// down_proj [E, H, I], its inputs split.
void AddFusedExperts(const HfConfig& c, const std::string& x, int64_t l,
                     TensorList* t);

}  // namespace reshard::internal

#endif  // RESHARD_HF_CONFIG_READER_H_
