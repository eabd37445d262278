// One connection to a Redis server: hiredis for connecting, formatting and
// parsing, and two bulk paths that bypass its copies: a SET whose value is
// written from caller memory with writev (hiredis would copy the value into
// its output buffer), and a bulk reply read straight into caller memory
// (hiredis would read it into a reply object first).
//
// Nothing a server sends is trusted to be small or prompt: a reply must
// arrive whole within the connection's timeout (one deadline per reply, not
// per socket read), a reply parsed into memory may hold at most
// kMaxRedisReplyBytes (redis_descriptor.h), and a bulk value read into
// caller memory must have the length the caller expects (a longer one is
// skipped only up to kMaxRedisChunkBytes). Past any limit the connection is
// dropped with IOError naming the URI; it is never read further.

#ifndef RESHARD_STORE_REDIS_REDIS_CONNECTION_H_
#define RESHARD_STORE_REDIS_REDIS_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "store_redis/redis_uri.h"
#include "util/file_io.h"

struct redisContext;
struct redisReply;
struct redisReadTask;
struct redisReplyObjectFunctions;

namespace reshard::internal {

// A parsed reply (owner of hiredis's reply object).
class RedisReply {
 public:
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };
  explicit RedisReply(redisReply* reply);
  RedisReply(RedisReply&&) noexcept;
  RedisReply& operator=(RedisReply&&) noexcept;
  ~RedisReply();

  Type type() const;
  // kString, kStatus, kError: the bytes.
  std::string_view str() const;
  // kInteger: the value.
  long long integer() const;
  // kArray: the elements (borrowed).
  size_t size() const;
  RedisReply::Type element_type(size_t i) const;
  std::string_view element_str(size_t i) const;
  long long element_integer(size_t i) const;

 private:
  redisReply* reply_;
};

class RedisConnection {
 public:
  // Connects (TCP or unix socket), authenticates and selects the database;
  // every error names `uri.redacted`.
  static Result<std::unique_ptr<RedisConnection>> Connect(
      const RedisUri& uri, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command and its reply. An error reply is returned as a reply of
  // type kError (callers decide); a lost connection, a reply past the
  // deadline or the size limit is an IOError.
  Result<RedisReply> Command(const std::vector<std::string_view>& args);

  // Pipelining: Append queues a command, Read returns the oldest reply not
  // read yet. Flush sends what is queued.
  Status Append(const std::vector<std::string_view>& args);
  Result<RedisReply> Read();

  // Sends "SET key value" where value is bytes [offset, offset + length)
  // of the concatenation of `parts`, written from caller memory with
  // writev (after any queued commands); its reply is read with Read().
  // With a non-empty `expiry_ms` the value expires after that many
  // milliseconds (sent as PSETEX key expiry_ms value, the value last).
  Status AppendSetFrom(std::string_view key,
                       const std::vector<ConstBuffer>& parts, uint64_t offset,
                       uint64_t length, std::string_view expiry_ms = {});

  // Reads the next reply, which must be a bulk string of exactly the
  // buffers' total size, into `dests` in order (one readv per socket read,
  // so a value may land in many caller rows without a copy). A shorter or
  // longer value is DataLoss naming `what`.
  Status ReadBulkInto(const std::vector<ReadBuffer>& dests,
                      const std::string& what);

  // False once an I/O error or protocol error made the connection unusable.
  bool healthy() const { return healthy_; }
  const std::string& uri() const { return uri_; }

 private:
  RedisConnection(redisContext* context, std::string uri,
                  std::chrono::milliseconds timeout);
  Status Lost(const std::string& what);
  // Marks the connection unusable; IOError "redis <uri>: <why>".
  Status Drop(const std::string& why);
  // Starts the deadline of the next reply.
  void StartReply();
  // Waits until the socket has bytes or the reply's deadline passes.
  Status WaitReadable(const char* what);
  // hiredis reply-object hooks: charge the reply's budget, then build the
  // object as hiredis would; nullptr (hiredis reports out of memory) once
  // the reply would pass kMaxRedisReplyBytes.
  static void* BoundedString(const redisReadTask* task, char* str, size_t len);
  static void* BoundedArray(const redisReadTask* task, int elements);
  static void* BoundedInteger(const redisReadTask* task, long long value);
  static void* BoundedNil(const redisReadTask* task);
  bool Charge(uint64_t bytes);
  Status FlushQueued();
  Status WriteFully(std::vector<ConstBuffer> pieces);
  // Ensures at least `n` unparsed bytes are buffered.
  Status Fill(size_t n);
  // One recv of at most `n` bytes into `buf` once the socket is readable
  // within the reply's deadline (EINTR and EAGAIN retried): the bytes
  // received, at least one; a closed or failed connection is Lost.
  Result<size_t> ReceiveSome(char* buf, size_t n);
  Status ReadLine(std::string* line);
  Status ReceiveInto(uint8_t* dest, uint64_t n);
  Status ReceiveInto(std::vector<ReadBuffer> dests);

  redisContext* context_;
  std::string uri_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  bool healthy_ = true;
  // hiredis's own reply-object functions, which the hooks call.
  const redisReplyObjectFunctions* default_functions_ = nullptr;
  // Bytes the reply being parsed may still allocate; set when it ran out.
  uint64_t reply_budget_ = 0;
  bool over_budget_ = false;
  // Bytes read past the hiredis reader by ReadBulkInto, not yet parsed;
  // handed back to hiredis before its next reply.
  std::string raw_;
  size_t raw_pos_ = 0;
};

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REDIS_REDIS_CONNECTION_H_
