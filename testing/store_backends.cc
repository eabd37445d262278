#include "testing/store_backends.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "reshard/store_uri.h"
#include "testing/must.h"
#include "testing/redis_server.h"

namespace reshard::testing {
namespace {

std::string RedisRaw(const std::vector<std::string>& args) {
  return SharedRedisServer().Command(args);
}

// The Redis value holding byte `offset` of object `key` under `prefix`,
// and the byte's position in it.
std::pair<std::string, uint64_t> RedisByte(const std::string& prefix,
                                           const std::string& key,
                                           uint64_t offset) {
  const std::string k = prefix + ":k:" + key;
  const std::string d = RedisRaw({"GET", k});
  EXPECT_FALSE(d.empty()) << "no object " << key;
  if (d.empty() || d[0] == 'r') return {k, offset + 1};
  // "c<size> <chunk_bytes> <token>"
  const size_t a = d.find(' '), b = d.find(' ', a + 1);
  const uint64_t chunk = std::stoull(d.substr(a + 1, b - a - 1));
  return {
      prefix + ":d:" + d.substr(b + 1) + ":" + std::to_string(offset / chunk),
      offset % chunk};
}

}  // namespace

std::vector<std::string> StoreBackendNames() { return {"fs", "redis"}; }

std::string StoreBackendCaseName(
    const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

BackendStore::BackendStore(const std::string& backend)
    : backend_name_(backend) {
  if (backend == "fs") {
    dir_ = std::make_unique<TempDir>("reshard-store-test");
    uri_ = "fs://" + dir_->path();
  } else {
    prefix_ = FreshRedisPrefix();
    uri_ = SharedRedisServer().Uri(prefix_);
  }
  backend_ = std::shared_ptr<ObjectStore>(Must(OpenObjectStore(uri_)));
}

void BackendStore::FlipByte(const std::string& key, uint64_t offset) {
  if (dir_ != nullptr) {
    const std::string path = dir_->path() + "/" + key;
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
    b ^= 0x01;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
    ::close(fd);
    return;
  }
  const auto [value, at] = RedisByte(prefix_, key, offset);
  const std::string pos = std::to_string(at);
  std::string byte = RedisRaw({"GETRANGE", value, pos, pos});
  ASSERT_EQ(byte.size(), 1u) << value;
  byte[0] = static_cast<char>(byte[0] ^ 0x01);
  RedisRaw({"SETRANGE", value, pos, byte});
}

void BackendStore::Truncate(const std::string& key, uint64_t size) {
  if (dir_ != nullptr) {
    const std::string path = dir_->path() + "/" + key;
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
    return;
  }
  const std::string k = prefix_ + ":k:" + key;
  const std::string v = RedisRaw({"GET", k});
  ASSERT_TRUE(!v.empty() && v[0] == 'r')
      << "Truncate supports one-value objects only";
  RedisRaw({"SET", k, v.substr(0, size + 1)});
}

size_t BackendStore::Temporaries() const {
  if (dir_ == nullptr) {
    return std::stoull(RedisRaw({"ZCARD", prefix_ + ":pending"}));
  }
  size_t n = 0;
  std::error_code ec;
  for (auto it =
           std::filesystem::recursive_directory_iterator(dir_->path(), ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().starts_with(".tmp.")) ++n;
  }
  return n;
}

}  // namespace reshard::testing
