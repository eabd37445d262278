#include "store_redis/redis_connection.h"

#include <hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

#include "store_redis/redis_descriptor.h"

namespace reshard::internal {
namespace {

// Each readv of a value asks for at most this many bytes. Asking for the
// whole rest of a 4 MiB value (scattered over 8 KiB rows or contiguous)
// measured 1.3-1.7x slower on loopback than 64 KiB steps; 32 KiB and
// 256 KiB measured about alike, 128 KiB slower (docs/store-format.md).
constexpr uint64_t kReadStepBytes = uint64_t{64} << 10;

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::vector<const char*> Pointers(const std::vector<std::string_view>& args,
                                  std::vector<size_t>* lengths) {
  std::vector<const char*> out;
  lengths->clear();
  for (std::string_view a : args) {
    out.push_back(a.data());
    lengths->push_back(a.size());
  }
  return out;
}

}  // namespace

RedisReply::RedisReply(redisReply* reply) : reply_(reply) {}
RedisReply::RedisReply(RedisReply&& other) noexcept : reply_(other.reply_) {
  other.reply_ = nullptr;
}
RedisReply& RedisReply::operator=(RedisReply&& other) noexcept {
  std::swap(reply_, other.reply_);
  return *this;
}
RedisReply::~RedisReply() {
  if (reply_ != nullptr) freeReplyObject(reply_);
}

namespace {
RedisReply::Type TypeOf(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return RedisReply::Type::kString;
    case REDIS_REPLY_ARRAY:
      return RedisReply::Type::kArray;
    case REDIS_REPLY_INTEGER:
      return RedisReply::Type::kInteger;
    case REDIS_REPLY_STATUS:
      return RedisReply::Type::kStatus;
    case REDIS_REPLY_ERROR:
      return RedisReply::Type::kError;
    default:
      return RedisReply::Type::kNil;
  }
}
}  // namespace

RedisReply::Type RedisReply::type() const { return TypeOf(reply_); }
std::string_view RedisReply::str() const {
  return reply_->str == nullptr ? std::string_view()
                                : std::string_view(reply_->str, reply_->len);
}
long long RedisReply::integer() const { return reply_->integer; }
size_t RedisReply::size() const {
  return reply_->type == REDIS_REPLY_ARRAY ? reply_->elements : 0;
}
RedisReply::Type RedisReply::element_type(size_t i) const {
  return TypeOf(reply_->element[i]);
}
std::string_view RedisReply::element_str(size_t i) const {
  const redisReply* e = reply_->element[i];
  return e->str == nullptr ? std::string_view()
                           : std::string_view(e->str, e->len);
}
long long RedisReply::element_integer(size_t i) const {
  return reply_->element[i]->integer;
}

// What one reply object costs the reply's budget besides its bytes.
constexpr uint64_t kReplyObjectBytes = sizeof(redisReply);

RedisConnection::RedisConnection(redisContext* context, std::string uri,
                                 std::chrono::milliseconds timeout)
    : context_(context), uri_(std::move(uri)), timeout_(timeout) {
  static redisReplyObjectFunctions bounded = {
      &RedisConnection::BoundedString, &RedisConnection::BoundedArray,
      &RedisConnection::BoundedInteger, &RedisConnection::BoundedNil,
      freeReplyObject};
  default_functions_ = context_->reader->fn;
  context_->reader->fn = &bounded;
  context_->reader->privdata = this;
}

bool RedisConnection::Charge(uint64_t bytes) {
  if (bytes > reply_budget_) {
    over_budget_ = true;
    return false;
  }
  reply_budget_ -= bytes;
  return true;
}

void* RedisConnection::BoundedString(const redisReadTask* task, char* str,
                                     size_t len) {
  auto* self = static_cast<RedisConnection*>(task->privdata);
  if (!self->Charge(kReplyObjectBytes + len)) return nullptr;
  return self->default_functions_->createString(task, str, len);
}

void* RedisConnection::BoundedArray(const redisReadTask* task, int elements) {
  auto* self = static_cast<RedisConnection*>(task->privdata);
  const uint64_t n = elements < 0 ? 0 : static_cast<uint64_t>(elements);
  if (!self->Charge(kReplyObjectBytes + n * sizeof(redisReply*))) {
    return nullptr;
  }
  return self->default_functions_->createArray(task, elements);
}

void* RedisConnection::BoundedInteger(const redisReadTask* task,
                                      long long value) {
  auto* self = static_cast<RedisConnection*>(task->privdata);
  if (!self->Charge(kReplyObjectBytes)) return nullptr;
  return self->default_functions_->createInteger(task, value);
}

void* RedisConnection::BoundedNil(const redisReadTask* task) {
  auto* self = static_cast<RedisConnection*>(task->privdata);
  if (!self->Charge(kReplyObjectBytes)) return nullptr;
  return self->default_functions_->createNil(task);
}

RedisConnection::~RedisConnection() { redisFree(context_); }

Result<std::unique_ptr<RedisConnection>> RedisConnection::Connect(
    const RedisUri& uri, std::chrono::milliseconds timeout) {
  const timeval tv = ToTimeval(timeout);
  redisContext* c =
      uri.socket_path.empty()
          ? redisConnectWithTimeout(uri.host.c_str(), uri.port, tv)
          : redisConnectUnixWithTimeout(uri.socket_path.c_str(), tv);
  if (c == nullptr) {
    return Status::IOError("cannot connect to " + uri.redacted +
                           ": out of memory");
  }
  std::unique_ptr<RedisConnection> conn(
      new RedisConnection(c, uri.redacted, timeout));
  if (c->err != 0) {
    return Status::IOError("cannot connect to " + uri.redacted + ": " +
                           c->errstr);
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    return Status::IOError("cannot set the timeout of " + uri.redacted);
  }
  auto check = [&](const std::vector<std::string_view>& args,
                   const std::string& what) -> Status {
    RESHARD_ASSIGN_OR_RETURN(RedisReply r, conn->Command(args));
    if (r.type() == RedisReply::Type::kError) {
      return Status::IOError(what + " on " + uri.redacted +
                             " failed: " + std::string(r.str()));
    }
    return Status::OK();
  };
  if (!uri.password.empty()) {
    std::vector<std::string_view> auth = {"AUTH"};
    if (!uri.user.empty()) auth.push_back(uri.user);
    auth.push_back(uri.password);
    RESHARD_RETURN_NOT_OK(check(auth, "AUTH"));
  }
  if (uri.db != 0) {
    RESHARD_RETURN_NOT_OK(check({"SELECT", std::to_string(uri.db)}, "SELECT"));
  }
  return conn;
}

Status RedisConnection::Lost(const std::string& what) {
  healthy_ = false;
  std::string detail = context_->err != 0 ? std::string(context_->errstr)
                                          : std::string(std::strerror(errno));
  if (detail.empty()) detail = "connection lost";
  return Status::IOError("redis " + uri_ + ": " + what + ": " + detail);
}

Status RedisConnection::Drop(const std::string& why) {
  healthy_ = false;
  return Status::IOError("redis " + uri_ + ": " + why);
}

void RedisConnection::StartReply() {
  deadline_ = std::chrono::steady_clock::now() + timeout_;
}

Status RedisConnection::WaitReadable(const char* what) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Drop(std::string(what) +
                  ": the reply did not arrive whole within " +
                  std::to_string(timeout_.count()) + " ms");
    }
    pollfd p{context_->fd, POLLIN, 0};
    const int ready = ::poll(
        &p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Lost(what);
    if (ready > 0) return Status::OK();
  }
}

Status RedisConnection::FlushQueued() {
  if (!healthy_) return Status::IOError("redis " + uri_ + ": connection lost");
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context_, &done) != REDIS_OK) {
      return Lost("cannot send");
    }
  }
  return Status::OK();
}

Result<RedisReply> RedisConnection::Command(
    const std::vector<std::string_view>& args) {
  RESHARD_RETURN_NOT_OK(Append(args));
  return Read();
}

Status RedisConnection::Append(const std::vector<std::string_view>& args) {
  if (!healthy_) return Status::IOError("redis " + uri_ + ": connection lost");
  std::vector<size_t> lengths;
  std::vector<const char*> argv = Pointers(args, &lengths);
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()),
                             argv.data(), lengths.data()) != REDIS_OK) {
    return Lost("cannot queue a command");
  }
  return Status::OK();
}

Result<RedisReply> RedisConnection::Read() {
  if (!healthy_) return Status::IOError("redis " + uri_ + ": connection lost");
  RESHARD_RETURN_NOT_OK(FlushQueued());
  redisReader* reader = context_->reader;
  if (raw_pos_ < raw_.size()) {  // bytes ReadBulkInto read past its reply
    redisReaderFeed(reader, raw_.data() + raw_pos_, raw_.size() - raw_pos_);
    raw_.clear();
    raw_pos_ = 0;
  }
  StartReply();
  reply_budget_ = kMaxRedisReplyBytes;
  over_budget_ = false;
  const std::string too_large = "a reply holds more than " +
                                std::to_string(kMaxRedisReplyBytes) +
                                " bytes (the limit of a reply read whole)";
  // Bytes buffered for this reply (and maybe the next ones pipelined).
  uint64_t received = reader->len - reader->pos;
  while (true) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
      if (over_budget_) return Drop(too_large);
      return Drop(std::string("malformed reply: ") + reader->errstr);
    }
    if (reply != nullptr) return RedisReply(static_cast<redisReply*>(reply));
    // A bulk string (at any depth) announced larger than the limit is
    // refused at once: hiredis has read its type byte and waits for the
    // length line and the bytes.
    if (reader->ridx >= 0 &&
        reader->rstack[reader->ridx].type == REDIS_REPLY_STRING) {
      const char* begin = reader->buf + reader->pos;
      const char* end = reader->buf + reader->len;
      if (begin < end && *begin == '$') ++begin;
      const char* cr = std::find(begin, end, '\r');
      uint64_t n = 0;
      if (cr != end && std::from_chars(begin, cr, n).ec == std::errc() &&
          n > kMaxRedisReplyBytes) {
        return Drop(too_large);
      }
    }
    if (received > kMaxRedisReplyBytes) return Drop(too_large);
    char buf[64 << 10];
    RESHARD_ASSIGN_OR_RETURN(const size_t got, ReceiveSome(buf, sizeof(buf)));
    if (redisReaderFeed(reader, buf, got) != REDIS_OK) {
      return Drop("cannot buffer a reply");
    }
    received += static_cast<uint64_t>(got);
  }
}

Status RedisConnection::WriteFully(std::vector<ConstBuffer> pieces) {
  size_t first = 0;
  while (first < pieces.size()) {
    iovec iov[64];
    int n = 0;
    for (size_t i = first; i < pieces.size() && n < 64; ++i) {
      iov[n].iov_base = const_cast<void*>(pieces[i].data);
      iov[n].iov_len = pieces[i].size;
      ++n;
    }
    const ssize_t wrote = ::writev(context_->fd, iov, n);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return Lost("cannot send a value");
    }
    uint64_t left = static_cast<uint64_t>(wrote);
    while (first < pieces.size() && left >= pieces[first].size) {
      left -= pieces[first].size;
      ++first;
    }
    if (left > 0) {
      pieces[first].data =
          static_cast<const uint8_t*>(pieces[first].data) + left;
      pieces[first].size -= left;
    }
  }
  return Status::OK();
}

Status RedisConnection::AppendSetFrom(std::string_view key,
                                      const std::vector<ConstBuffer>& parts,
                                      uint64_t offset, uint64_t length,
                                      std::string_view expiry_ms) {
  RESHARD_RETURN_NOT_OK(FlushQueued());
  // With an expiry the command is PSETEX, whose value is its last
  // argument: the server then reads a large value straight into the string
  // it keeps (as for a plain SET). After a value followed by more
  // arguments (SET ... PX), its next read takes them with the following
  // command and much of that command's value, which it then copies.
  std::string header = expiry_ms.empty()
                           ? std::string("*3\r\n$3\r\nSET\r\n$")
                           : std::string("*4\r\n$6\r\nPSETEX\r\n$");
  header += std::to_string(key.size()) + "\r\n" + std::string(key) + "\r\n";
  if (!expiry_ms.empty()) {
    header += "$" + std::to_string(expiry_ms.size()) + "\r\n" +
              std::string(expiry_ms) + "\r\n";
  }
  header += "$" + std::to_string(length) + "\r\n";
  std::vector<ConstBuffer> pieces = {{header.data(), header.size()}};
  uint64_t at = 0;
  for (const ConstBuffer& p : parts) {
    const uint64_t begin = std::max(at, offset);
    const uint64_t end = std::min(at + p.size, offset + length);
    if (begin < end) {
      pieces.push_back(
          {static_cast<const uint8_t*>(p.data) + (begin - at), end - begin});
    }
    at += p.size;
  }
  static constexpr char kTrailer[] = "\r\n";
  pieces.push_back({kTrailer, 2});
  return WriteFully(std::move(pieces));
}

Status RedisConnection::Fill(size_t n) {
  while (raw_.size() - raw_pos_ < n) {
    if (raw_pos_ > 0 && raw_pos_ == raw_.size()) {
      raw_.clear();
      raw_pos_ = 0;
    }
    char buf[64 << 10];
    RESHARD_ASSIGN_OR_RETURN(const size_t got, ReceiveSome(buf, sizeof(buf)));
    raw_.append(buf, got);
  }
  return Status::OK();
}

Result<size_t> RedisConnection::ReceiveSome(char* buf, size_t n) {
  while (true) {
    RESHARD_RETURN_NOT_OK(WaitReadable("no reply"));
    const ssize_t got = ::recv(context_->fd, buf, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      if (got == 0) errno = ECONNRESET;
      return Lost("no reply");
    }
    return static_cast<size_t>(got);
  }
}

Status RedisConnection::ReadLine(std::string* line) {
  while (true) {
    const size_t eol = raw_.find("\r\n", raw_pos_);
    if (eol != std::string::npos) {
      line->assign(raw_, raw_pos_, eol - raw_pos_);
      raw_pos_ = eol + 2;
      return Status::OK();
    }
    if (raw_.size() - raw_pos_ > 4096) {
      healthy_ = false;
      return Status::IOError("redis " + uri_ + ": malformed reply");
    }
    RESHARD_RETURN_NOT_OK(Fill(raw_.size() - raw_pos_ + 1));
  }
}

Status RedisConnection::ReceiveInto(uint8_t* dest, uint64_t n) {
  return ReceiveInto({{dest, n}});
}

Status RedisConnection::ReceiveInto(std::vector<ReadBuffer> dests) {
  // What an earlier read buffered past its reply comes first.
  size_t first = 0;
  while (first < dests.size() && raw_pos_ < raw_.size()) {
    ReadBuffer& d = dests[first];
    if (d.size == 0) {
      ++first;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(d.size, raw_.size() - raw_pos_);
    std::memcpy(d.data, raw_.data() + raw_pos_, take);
    raw_pos_ += take;
    d.data = static_cast<uint8_t*>(d.data) + take;
    d.size -= take;
    if (d.size == 0) ++first;
  }
  std::vector<iovec> iov;
  while (true) {
    while (first < dests.size() && dests[first].size == 0) ++first;
    if (first == dests.size()) return Status::OK();
    iov.clear();
    uint64_t asked = 0;
    for (size_t i = first;
         i < dests.size() && iov.size() < IOV_MAX && asked < kReadStepBytes;
         ++i) {
      const uint64_t n = std::min(dests[i].size, kReadStepBytes - asked);
      iov.push_back({dests[i].data, n});
      asked += n;
    }
    RESHARD_RETURN_NOT_OK(WaitReadable("value cut short"));
    const ssize_t got =
        ::readv(context_->fd, iov.data(), static_cast<int>(iov.size()));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      if (got == 0) errno = ECONNRESET;
      return Lost("value cut short");
    }
    for (uint64_t left = static_cast<uint64_t>(got); left > 0;) {
      ReadBuffer& d = dests[first];
      const uint64_t take = std::min(left, d.size);
      d.data = static_cast<uint8_t*>(d.data) + take;
      d.size -= take;
      left -= take;
      if (d.size == 0) ++first;
    }
  }
}

Status RedisConnection::ReadBulkInto(const std::vector<ReadBuffer>& dests,
                                     const std::string& what) {
  uint64_t length = 0;
  for (const ReadBuffer& d : dests) length += d.size;
  RESHARD_RETURN_NOT_OK(FlushQueued());
  StartReply();
  // Take over what hiredis' reader buffered but did not parse.
  redisReader* reader = context_->reader;
  if (reader->pos < reader->len) {
    raw_.append(reader->buf + reader->pos, reader->len - reader->pos);
    reader->pos = reader->len;
  }
  std::string line;
  RESHARD_RETURN_NOT_OK(ReadLine(&line));
  if (line.starts_with('-')) {
    return Status::IOError("redis " + uri_ + ": " + what + ": " +
                           line.substr(1));
  }
  int64_t n = -2;
  if (line.size() < 2 || line[0] != '$' ||
      std::from_chars(line.data() + 1, line.data() + line.size(), n).ec !=
          std::errc()) {
    healthy_ = false;
    return Status::IOError("redis " + uri_ + ": " + what +
                           ": unexpected reply");
  }
  if (n != static_cast<int64_t>(length) &&
      n > static_cast<int64_t>(kMaxRedisChunkBytes)) {
    // Never read that much to stay in step: drop the connection instead.
    return Drop(what + ": a value of " + std::to_string(n) + " bytes where " +
                std::to_string(length) + " were expected (more than " +
                std::to_string(kMaxRedisChunkBytes) +
                " bytes, the largest value a store writes)");
  }
  if (n != static_cast<int64_t>(length)) {
    // Keep the stream in step: skip the value we did not expect.
    for (int64_t left = n; left > 0;) {
      uint8_t skip[64 << 10];
      const uint64_t step = std::min<uint64_t>(left, sizeof(skip));
      RESHARD_RETURN_NOT_OK(ReceiveInto(skip, step));
      left -= static_cast<int64_t>(step);
    }
    if (n >= 0) {
      RESHARD_RETURN_NOT_OK(Fill(2));
      raw_pos_ += 2;
    }
    return Status::DataLoss(
        what + " holds " +
        (n < 0 ? std::string("no value") : std::to_string(n) + " bytes") +
        " where " + std::to_string(length) + " were expected");
  }
  RESHARD_RETURN_NOT_OK(ReceiveInto(dests));
  RESHARD_RETURN_NOT_OK(Fill(2));
  if (raw_.compare(raw_pos_, 2, "\r\n") != 0) {
    healthy_ = false;
    return Status::IOError("redis " + uri_ + ": malformed reply");
  }
  raw_pos_ += 2;
  return Status::OK();
}

}  // namespace reshard::internal
