#include "testing/redis_server.h"

#include <arpa/inet.h>
#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace reshard::testing {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

// A loopback port free at the moment of the call.
Result<uint16_t> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IOError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return Status::IOError("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool Answers(const std::string& socket) {
  redisContext* c = redisConnectUnix(socket.c_str());
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    // Up: PONG, or NOAUTH from a password-protected server; not LOADING
    // (still replaying its AOF).
    ok = r != nullptr &&
         ((r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG") ||
          (r->type == REDIS_REPLY_ERROR &&
           std::string(r->str).starts_with("NOAUTH")));
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace

Result<std::unique_ptr<RedisServer>> RedisServer::Start(
    const Options& options) {
  if (::access(kRedisServer, X_OK) != 0) {
    return Status::FailedPrecondition(
        std::string(kRedisServer) +
        " is missing: run scripts/bootstrap.sh (Debian package redis-server)");
  }
  std::unique_ptr<RedisServer> server(new RedisServer(options));
  server->socket_ = server->dir_.path() + "/redis.sock";
  Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    RESHARD_ASSIGN_OR_RETURN(server->port_, FreePort());
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

Status RedisServer::Launch() {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {kRedisServer,
                                   "--port",
                                   port,
                                   "--bind",
                                   "127.0.0.1",
                                   "--unixsocket",
                                   socket_,
                                   "--unixsocketperm",
                                   "700",
                                   "--dir",
                                   dir_.path(),
                                   "--logfile",
                                   dir_.path() + "/redis.log",
                                   "--daemonize",
                                   "no",
                                   "--save",
                                   "",
                                   "--protected-mode",
                                   "no",
                                   "--appendonly",
                                   options_.aof ? "yes" : "no",
                                   "--appendfsync",
                                   "always"};
  if (!options_.password.empty()) {
    args.insert(args.end(), {"--requirepass", options_.password});
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(kRedisServer, argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int wstatus = 0;
    if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::IOError("redis-server exited at start (port " + port +
                             "; see " + dir_.path() + "/redis.log)");
    }
    if (Answers(socket_)) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Kill();
  return Status::Unavailable("redis-server did not answer within 10 s");
}

RedisServer::~RedisServer() { Kill(); }

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  std::error_code ec;
  std::filesystem::remove(socket_, ec);
}

Status RedisServer::Restart() {
  Kill();
  return Launch();
}

std::string RedisServer::Command(const std::vector<std::string>& args) const {
  redisContext* c = redisConnectUnix(socket_.c_str());
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "";
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(
      c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  std::string out;
  if (r != nullptr) {
    if (r->type == REDIS_REPLY_INTEGER) {
      out = std::to_string(r->integer);
    } else if (r->str != nullptr) {
      out.assign(r->str, r->len);
    } else if (r->type == REDIS_REPLY_ARRAY) {
      out = std::to_string(r->elements);
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

std::string RedisServer::Uri(std::string_view prefix) const {
  const std::string auth =
      options_.password.empty() ? "" : ":" + options_.password + "@";
  return "redis://" + auth + "127.0.0.1:" + std::to_string(port_) +
         "?prefix=" + std::string(prefix);
}

std::string RedisServer::UnixUri(std::string_view prefix) const {
  return "unix://" + socket_ + "?prefix=" + std::string(prefix);
}

namespace {
// Deliberately not a static object: a forked child that exits through
// exit() must not run a destructor that stops its parent's server.
RedisServer* shared_server = nullptr;
pid_t shared_owner = 0;

void StopSharedServer() {
  if (shared_server != nullptr && ::getpid() == shared_owner) {
    delete shared_server;
    shared_server = nullptr;
  }
}
}  // namespace

RedisServer& SharedRedisServer() {
  static std::once_flag once;
  std::call_once(once, [] {
    Result<std::unique_ptr<RedisServer>> s = RedisServer::Start();
    if (!s.ok()) {
      std::fprintf(stderr, "cannot start a test redis-server: %s\n",
                   s.status().ToString().c_str());
      std::abort();
    }
    shared_server = s->release();
    shared_owner = ::getpid();
    std::atexit(StopSharedServer);
  });
  return *shared_server;
}

std::string FreshRedisPrefix() {
  static std::atomic<uint64_t> next{0};
  return "t" + std::to_string(::getpid()) + "-" + std::to_string(next++);
}

}  // namespace reshard::testing
