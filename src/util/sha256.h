// SHA-256 through OpenSSL's EVP interface.

#ifndef RESHARD_UTIL_SHA256_H_
#define RESHARD_UTIL_SHA256_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace reshard::internal {

// Incremental hasher. Move-only owner of an EVP_MD_CTX.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  // An independent hasher that has seen the same bytes as this one.
  Sha256 Clone() const;
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();
  // Lowercase hex of Finish().
  std::string FinishHex();

 private:
  struct NoInit {};
  explicit Sha256(NoInit);
  void* ctx_;  // EVP_MD_CTX*
};

// Lowercase hex SHA-256 of `bytes` (64 characters).
std::string Sha256Hex(std::string_view bytes);

// "sha256:" + Sha256Hex(bytes): the form of every reshard id.
std::string Sha256Id(std::string_view bytes);

// True if `s` is exactly 64 lowercase hex characters.
bool IsLowercaseSha256Hex(std::string_view s);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_SHA256_H_
