#include "util/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace reshard::internal {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation or init failure of a built-in digest is unrecoverable.
  if (ctx_ == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_),
                                           EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
}

Sha256::Sha256(NoInit) : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) std::abort();
}

Sha256 Sha256::Clone() const {
  Sha256 copy{NoInit{}};
  if (EVP_MD_CTX_copy_ex(static_cast<EVP_MD_CTX*>(copy.ctx_),
                         static_cast<const EVP_MD_CTX*>(ctx_)) != 1) {
    std::abort();
  }
  return copy;
}

Sha256::~Sha256() {
  if (ctx_ != nullptr) EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

Sha256::Sha256(Sha256&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)) {}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    if (ctx_ != nullptr) EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

void Sha256::Update(std::string_view bytes) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  // Hashed straight from memory, a long input runs at about half the speed
  // of one in cache (one stream of demand misses): long inputs go in chunks
  // whose successors are prefetched two chunks ahead.
  constexpr size_t kChunk = 8 << 10;
  constexpr size_t kAhead = 2 * kChunk;
  constexpr size_t kLine = 64;
  const char* p = bytes.data();
  const size_t n = bytes.size();
  if (n < 8 * kChunk) {
    EVP_DigestUpdate(ctx, p, n);
    return;
  }
  for (size_t q = 0; q < kAhead; q += kLine) __builtin_prefetch(p + q);
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t ahead_end = std::min(n, at + kAhead + kChunk);
    for (size_t q = at + kAhead; q < ahead_end; q += kLine) {
      __builtin_prefetch(p + q);
    }
    EVP_DigestUpdate(ctx, p + at, std::min(kChunk, n - at));
  }
}

std::array<uint8_t, 32> Sha256::Finish() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len);
  return out;
}

std::string Sha256::FinishHex() {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto raw = Finish();
  std::string hex(64, '0');
  for (size_t i = 0; i < raw.size(); ++i) {
    hex[2 * i] = kHex[raw[i] >> 4];
    hex[2 * i + 1] = kHex[raw[i] & 0xF];
  }
  return hex;
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.FinishHex();
}

std::string Sha256Id(std::string_view bytes) {
  return "sha256:" + Sha256Hex(bytes);
}

bool IsLowercaseSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace reshard::internal
