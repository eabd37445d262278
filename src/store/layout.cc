#include "store/layout.h"

#include <unistd.h>

#include <chrono>
#include <random>

namespace reshard::internal {

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomHex(size_t bytes) {
  static thread_local pid_t seeded_in = 0;
  static thread_local std::mt19937_64 rng;
  if (seeded_in != ::getpid()) {
    seeded_in = ::getpid();
    std::random_device rd;
    rng.seed((uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(seeded_in) << 17));
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<uint8_t>(rng());
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string TransactionOfObject(std::string_view object_key) {
  const size_t p = object_key.rfind("/payload/");
  if (p == std::string_view::npos) return "";
  std::string_view rest = object_key.substr(p + 9);
  return std::string(rest.substr(0, rest.find('/')));
}

std::string BaseOfManifestKey(std::string_view manifest_key) {
  constexpr std::string_view kSuffix = "/manifest";
  if (!manifest_key.ends_with(kSuffix)) return "";
  return std::string(
      manifest_key.substr(0, manifest_key.size() - kSuffix.size()));
}

std::string ChecksumKey(std::string_view base, std::string_view txn,
                        std::string_view fragment_id) {
  return std::string(base) + "/checksums/" + std::string(txn) + "/" +
         std::string(fragment_id);
}

Result<ChunkSums> ReadChunkSums(ObjectStore& backend, std::string_view base,
                                const StoredFragment& fragment) {
  RESHARD_ASSIGN_OR_RETURN(
      auto record,
      backend.Get(ChecksumKey(base, TransactionOfObject(fragment.object_key),
                              fragment.fragment_id)));
  auto sums = ParseChecksumRecord(record);
  if (!sums.ok()) {
    return sums.status().WithContext("stored fragment " + fragment.fragment_id);
  }
  return sums;
}

}  // namespace reshard::internal
