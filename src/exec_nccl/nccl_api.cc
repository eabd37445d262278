#include "exec_nccl/nccl_api.h"

#include <memory>
#include <string>

namespace reshard::nccl {

std::string UniqueIdToHex(const NcclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * id.bytes.size());
  for (uint8_t b : id.bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

bool UniqueIdFromHex(const std::string& hex, NcclUniqueId* id) {
  if (hex.size() != 2 * id->bytes.size()) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < id->bytes.size(); ++i) {
    const int hi = digit(hex[2 * i]);
    const int lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    id->bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

size_t DataTypeBytes(NcclDataType type) {
  switch (type) {
    case NcclDataType::kInt8:
    case NcclDataType::kUint8:
      return 1;
    case NcclDataType::kInt32:
    case NcclDataType::kUint32:
      return 4;
    case NcclDataType::kInt64:
    case NcclDataType::kUint64:
      return 8;
  }
  return 0;
}

#if !RESHARD_NCCL_BUILT
bool NcclLibraryBuilt() { return false; }

Result<std::unique_ptr<NcclApi>> MakeNcclLibraryApi() {
  return Status::Unimplemented(
      "this build has no NCCL (configure with RESHARD_CUDA ON where "
      "cmake/nccl.cmake finds nccl.h and libnccl)");
}
#endif

}  // namespace reshard::nccl
