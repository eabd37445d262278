// The safetensors header parser: as strict as the reference reader, with
// errors that name the file and the tensor.

#include <algorithm>
#include <array>
#include <set>

#include "reshard/hf.h"
#include "util/dims_text.h"
#include "util/json_reader.h"
#include "util/printable.h"

namespace reshard {
namespace {

using internal::DimsText;

using internal::JsonElement;
using internal::Printable;

constexpr std::array<SafetensorsDtype, 15> kDtypes = {{
    {"BOOL", "bool", 1},
    {"U8", "uint8", 1},
    {"I8", "int8", 1},
    {"F8_E4M3", "float8_e4m3fn", 1},
    {"F8_E5M2", "float8_e5m2", 1},
    {"I16", "int16", 2},
    {"U16", "uint16", 2},
    {"F16", "float16", 2},
    {"BF16", "bfloat16", 2},
    {"I32", "int32", 4},
    {"U32", "uint32", 4},
    {"F32", "float32", 4},
    {"I64", "int64", 8},
    {"U64", "uint64", 8},
    {"F64", "float64", 8},
}};

std::string Where(std::string_view file, std::string_view tensor) {
  return Printable(file) + ": tensor " + Printable(tensor);
}

// The tensor's byte size: product(shape) x itemsize, nullopt past 64 bits.
std::optional<uint64_t> ByteSize(const Dims& shape, int64_t itemsize) {
  uint64_t n = static_cast<uint64_t>(itemsize);
  for (int64_t d : shape) {
    const auto u = static_cast<uint64_t>(d);
    if (u != 0 && n > UINT64_MAX / u) return std::nullopt;
    n *= u;
  }
  return n;
}

// One tensor entry: {"dtype", "shape", "data_offsets"}, checked on its own
// against the data buffer of `data_size` bytes starting at `data_offset`.
Result<SafetensorsTensor> ReadTensor(std::string_view file,
                                     std::string_view name, JsonElement value,
                                     uint64_t data_offset, uint64_t data_size) {
  const std::string where = Where(file, name);
  internal::JsonPath path;
  auto obj = internal::StrictObject::Make(value, path, "safetensors tensor",
                                          {"data_offsets", "dtype", "shape"});
  if (!obj.ok()) return obj.status().WithContext(where);
  SafetensorsTensor t;
  t.name = std::string(name);
  auto dtype = obj->String("dtype");
  if (!dtype.ok()) return dtype.status().WithContext(where);
  const SafetensorsDtype* dt = FindSafetensorsDtype(*dtype);
  if (dt == nullptr) {
    return Status::InvalidArgument(where + ": unknown dtype " +
                                   Printable(*dtype));
  }
  t.dtype = std::string(dt->name);
  auto shape = obj->IntArray("shape");
  if (!shape.ok()) return shape.status().WithContext(where);
  for (int64_t d : *shape) {
    if (d < 0) {
      return Status::InvalidArgument(where + ": negative dimension in shape " +
                                     DimsText(*shape));
    }
  }
  t.shape = std::move(*shape);
  auto offsets = obj->Array("data_offsets");
  if (!offsets.ok()) return offsets.status().WithContext(where);
  if (offsets->size() != 2) {
    return Status::InvalidArgument(where +
                                   ": data_offsets must be [begin, end]");
  }
  std::vector<uint64_t> be;
  RESHARD_RETURN_NOT_OK(
      offsets
          ->ForEach([&](JsonElement e, const internal::JsonPath& p) {
            auto v = internal::ReadU64(e, p);
            if (!v.ok()) return v.status();
            be.push_back(*v);
            return Status::OK();
          })
          .WithContext(where + ": data_offsets"));
  t.begin = be[0];
  t.end = be[1];
  const std::string range =
      "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
  if (t.end < t.begin) {
    return Status::InvalidArgument(where + ": data_offsets " + range +
                                   " end before begin");
  }
  if (t.end > data_size) {
    return Status::OutOfRange(where + ": data_offsets " + range +
                              " past the end of the data (" +
                              std::to_string(data_size) + " bytes)");
  }
  const auto bytes = ByteSize(t.shape, dt->itemsize);
  if (!bytes || *bytes != t.end - t.begin) {
    return Status::InvalidArgument(
        where + ": " + std::string(dt->name) + " shape " + DimsText(t.shape) +
        " is " + (bytes ? std::to_string(*bytes) : "more than 2^64") +
        " bytes but data_offsets " + range + " hold " +
        std::to_string(t.end - t.begin));
  }
  // (An empty tensor has no data to align.)
  if (t.end > t.begin &&
      (data_offset + t.begin) % static_cast<uint64_t>(dt->itemsize) != 0) {
    return Status::InvalidArgument(
        where + ": misaligned: " + std::string(dt->name) + " data at file " +
        "offset " + std::to_string(data_offset + t.begin) +
        " is not a multiple of " + std::to_string(dt->itemsize));
  }
  return t;
}

Status ReadMetadata(std::string_view file, JsonElement value,
                    std::map<std::string, std::string>* out) {
  simdjson::dom::object obj;
  if (value.get_object().get(obj) != simdjson::SUCCESS) {
    return Status::InvalidArgument(Printable(file) +
                                   ": __metadata__ must be an object");
  }
  for (auto field : obj) {
    std::string_view v;
    if (field.value.get_string().get(v) != simdjson::SUCCESS) {
      return Status::InvalidArgument(Printable(file) + ": __metadata__ " +
                                     Printable(field.key) +
                                     " must be a string");
    }
    if (!out->emplace(std::string(field.key), std::string(v)).second) {
      return Status::InvalidArgument(Printable(file) +
                                     ": duplicate __metadata__ key " +
                                     Printable(field.key));
    }
  }
  return Status::OK();
}

// The tensors tile the data buffer exactly: no overlap, no hole, nothing
// after the last one.
Status CheckTiling(std::string_view file,
                   std::vector<SafetensorsTensor>* tensors,
                   uint64_t data_size) {
  std::sort(tensors->begin(), tensors->end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t at = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : *tensors) {
    if (t.begin < at) {
      return Status::InvalidArgument(
          Where(file, t.name) + ": data_offsets [" + std::to_string(t.begin) +
          ", " + std::to_string(t.end) + ") overlap tensor " +
          Printable(prev->name) + " [" + std::to_string(prev->begin) + ", " +
          std::to_string(prev->end) + ")");
    }
    if (t.begin > at) {
      return Status::InvalidArgument(
          Where(file, t.name) + ": data_offsets begin " +
          std::to_string(t.begin) + " leaves a hole of " +
          std::to_string(t.begin - at) + " bytes after " +
          (prev == nullptr ? std::string("the header")
                           : "tensor " + Printable(prev->name)));
    }
    if (t.end > t.begin) {
      at = t.end;
      prev = &t;
    }
  }
  if (at != data_size) {
    return Status::InvalidArgument(
        Printable(file) + ": " + std::to_string(data_size - at) +
        " bytes of data after the last tensor" +
        (prev == nullptr ? std::string() : " " + Printable(prev->name)));
  }
  return Status::OK();
}

}  // namespace

const SafetensorsDtype* FindSafetensorsDtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const SafetensorsDtype* FindSafetensorsDtypeByPlacement(
    std::string_view placement_dtype) {
  for (const auto& d : kDtypes) {
    if (d.placement == placement_dtype) return &d;
  }
  return nullptr;
}

Result<uint64_t> ParseSafetensorsPrefix(std::string_view file,
                                        std::string_view first8,
                                        uint64_t file_size) {
  if (first8.size() < 8 || file_size < 8) {
    return Status::InvalidArgument(
        Printable(file) + ": truncated safetensors header: " +
        std::to_string(file_size) + " bytes, shorter than the 8-byte length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) {
    n = (n << 8) | static_cast<uint8_t>(first8[static_cast<size_t>(i)]);
  }
  if (n > kMaxSafetensorsHeaderBytes) {
    return Status::InvalidArgument(
        Printable(file) + ": safetensors header length " + std::to_string(n) +
        " exceeds " + std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file_size - 8) {
    return Status::InvalidArgument(
        Printable(file) + ": safetensors header length " + std::to_string(n) +
        " runs past the end of the file (" + std::to_string(file_size) +
        " bytes)");
  }
  if (n < 2) {
    return Status::InvalidArgument(Printable(file) +
                                   ": safetensors header length " +
                                   std::to_string(n) + " is too short");
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                 std::string_view json,
                                                 uint64_t file_size) {
  SafetensorsHeader h;
  h.header_bytes = json.size();
  h.data_offset = 8 + json.size();
  if (json.size() > kMaxSafetensorsHeaderBytes || h.data_offset > file_size) {
    return Status::InvalidArgument(Printable(file) +
                                   ": safetensors header runs past the file");
  }
  if (json.empty() || json[0] != '{') {
    return Status::InvalidArgument(Printable(file) +
                                   ": safetensors header must start with '{'");
  }
  const uint64_t data_size = file_size - h.data_offset;
  auto doc = internal::JsonDocument::Parse(json);
  if (!doc.ok()) {
    return doc.status().WithContext(Printable(file) + ": safetensors header");
  }
  simdjson::dom::object root;
  if (doc->root().get_object().get(root) != simdjson::SUCCESS) {
    return Status::InvalidArgument(
        Printable(file) + ": safetensors header must be a JSON object");
  }
  std::set<std::string_view> seen;
  for (auto field : root) {
    if (!seen.insert(field.key).second) {
      return Status::InvalidArgument(Printable(file) + ": duplicate tensor " +
                                     Printable(field.key) + " in the header");
    }
    if (field.key == "__metadata__") {
      RESHARD_RETURN_NOT_OK(ReadMetadata(file, field.value, &h.metadata));
      continue;
    }
    if (field.key.empty()) {
      return Status::InvalidArgument(Printable(file) +
                                     ": tensor with an empty name");
    }
    RESHARD_ASSIGN_OR_RETURN(auto t, ReadTensor(file, field.key, field.value,
                                                h.data_offset, data_size));
    h.tensors.push_back(std::move(t));
  }
  RESHARD_RETURN_NOT_OK(CheckTiling(file, &h.tensors, data_size));
  return h;
}

std::string EncodeSafetensorsHeader(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::map<std::string_view, const SafetensorsTensor*> keyed;
  for (const SafetensorsTensor& t : tensors) keyed[t.name] = &t;
  std::string json;
  internal::CanonicalJsonWriter w(&json);
  w.BeginObject();
  bool meta_done = metadata.empty();
  auto write_meta = [&] {
    w.Key("__metadata__");
    w.BeginObject();
    for (const auto& [k, v] : metadata) w.KeyString(k, v);
    w.EndObject();
    meta_done = true;
  };
  for (const auto& [name, t] : keyed) {
    if (!meta_done && std::string_view("__metadata__") < name) write_meta();
    w.Key(name);
    w.BeginObject();
    w.Key("data_offsets");
    w.BeginArray();
    w.UInt(t->begin);
    w.UInt(t->end);
    w.EndArray();
    w.KeyString("dtype", t->dtype);
    w.Key("shape");
    w.IntArray(t->shape);
    w.EndObject();
  }
  if (!meta_done) write_meta();
  w.EndObject();
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = char(n >> (8 * i));
  return out + json;
}

}  // namespace reshard
