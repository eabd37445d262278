// A private redis-server for tests: started on a free loopback port and a
// unix socket, with its own data directory (AOF on, fsync always), killed
// and removed when its owner goes away, and killed by the kernel if the
// test process dies first (PR_SET_PDEATHSIG). Tests never touch a server
// they did not start.

#ifndef RESHARD_TESTING_REDIS_SERVER_H_
#define RESHARD_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"
#include "testing/temp_dir.h"

namespace reshard::testing {

class RedisServer {
 public:
  struct Options {
    bool aof = true;       // appendonly yes, appendfsync always
    std::string password;  // requirepass, if not empty
  };
  static Result<std::unique_ptr<RedisServer>> Start(const Options& options);
  static Result<std::unique_ptr<RedisServer>> Start() { return Start({}); }
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  uint16_t port() const { return port_; }
  const std::string& socket_path() const { return socket_; }
  // redis://127.0.0.1:PORT?prefix=PREFIX (with the password, if any).
  std::string Uri(std::string_view prefix) const;
  // unix://SOCKET?prefix=PREFIX.
  std::string UnixUri(std::string_view prefix) const;

  // One command over the unix socket, bypassing any store (for what tests
  // inspect or damage); the reply as text: a string, an integer in
  // decimal, an array's length; "" for nil or no reply.
  std::string Command(const std::vector<std::string>& args) const;

  // SIGKILL, then waits for it to exit.
  void Kill();
  // Starts it again on the same port and data directory (the AOF is
  // replayed) and waits until it answers.
  Status Restart();
  bool running() const { return pid_ > 0; }

 private:
  explicit RedisServer(Options options) : options_(std::move(options)) {}
  Status Launch();

  Options options_;
  TempDir dir_{"reshard-redis-test"};
  std::string socket_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// A server shared by the tests of this process, started on first use and
// stopped at exit. Tests isolate themselves with FreshRedisPrefix().
RedisServer& SharedRedisServer();

// A key prefix no other store of this process has used.
std::string FreshRedisPrefix();

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_REDIS_SERVER_H_
