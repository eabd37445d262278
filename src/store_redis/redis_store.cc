// The Redis backend (include/reshard/backends/redis_store.h). Keys, scripts and
// their atomicity are described in redis_scripts.h; connections and the
// copy-free bulk paths in redis_connection.h.

#include "reshard/backends/redis_store.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "store_redis/redis_connection.h"
#include "store_redis/redis_descriptor.h"
#include "store_redis/redis_scripts.h"
#include "store_redis/redis_uri.h"

namespace reshard {
namespace {

using internal::RedisConnection;
using internal::RedisReply;
using internal::RedisUri;
using Type = internal::RedisReply::Type;

// Chunks not yet published expire after this long.
constexpr int64_t kChunkExpiryMs = int64_t{6} * 3600 * 1000;
// Objects up to this size are one value ("r" + bytes), like records.
constexpr uint64_t kInlineObjectBytes = uint64_t{64} << 10;
// Keys per ZRANGEBYLEX page of List (each reply stays small).
constexpr uint64_t kListPageKeys = 10000;

// What P:k:<key> holds.
struct Descriptor {
  bool chunked = false;
  uint64_t size = 0;
  uint64_t chunk_bytes = 0;
  std::string token;
};

using internal::ReadBuffer;

// One GETRANGE of a value into caller memory: `dests` in order.
struct Piece {
  std::string value_key;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<ReadBuffer> dests;
  std::string what;  // names the object (and chunk) in errors
  // The piece is its whole value: GET, which the server answers from the
  // value itself, where GETRANGE copies the range first.
  bool whole = false;
};

// Unique per upload: random bits, and the process id, because forked
// children inherit their parent's generator state.
std::string RandomToken() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%x-%016llx%016llx",
                static_cast<unsigned>(::getpid()),
                static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

bool ParseU64(std::string_view text, uint64_t* out) {
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Runs fn(i) for i in [0, n) on up to `threads` threads; the first error.
Status ParallelFor(size_t n, uint32_t threads,
                   const std::function<Status(size_t)>& fn) {
  threads = static_cast<uint32_t>(std::min<size_t>(std::max(1u, threads), n));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) RESHARD_RETURN_NOT_OK(fn(i));
    return Status::OK();
  }
  std::vector<Status> results(threads);
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] { results[t] = fn(t); });
  }
  results[0] = fn(0);
  for (auto& th : pool) th.join();
  for (const Status& st : results) RESHARD_RETURN_NOT_OK(st);
  return Status::OK();
}

class RedisStore : public ObjectStore {
 public:
  RedisStore(RedisUri uri, RedisStoreOptions options)
      : uri_(std::move(uri)), options_(options) {
    options_.connections = std::max(1u, options_.connections);
    options_.write_connections = std::max(1u, options_.write_connections);
    options_.pipeline_depth = std::max(1u, options_.pipeline_depth);
    const std::string& p = uri_.prefix;
    index_ = p + ":index";
    pending_ = p + ":pending";
    chunks_ = p + ":d:";
  }

  // Connects once (so that a bad URI, password or database fails at open)
  // and checks durability when the store promises it (Sync()).
  Status Init() {
    if (options_.chunk_bytes < internal::kMinRedisChunkBytes ||
        options_.chunk_bytes > internal::kMaxRedisChunkBytes) {
      return Status::InvalidArgument(
          "redis chunk_bytes must be in [" +
          std::to_string(internal::kMinRedisChunkBytes) + ", " +
          std::to_string(internal::kMaxRedisChunkBytes) + "], not " +
          std::to_string(options_.chunk_bytes));
    }
    RESHARD_ASSIGN_OR_RETURN(auto conn, Connect());
    Release(std::move(conn));
    return options_.require_durable ? Sync() : Status::OK();
  }

  Status Put(std::string_view key, std::string_view value) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    std::string v;
    v.reserve(value.size() + 1);
    v.push_back('r');
    v.append(value);
    return PublishValue(key, v);
  }

  // One GET: a record (or one-value object) comes back whole in its reply,
  // which matters for a rendezvous that polls records; a chunked object's
  // descriptor is read from the same reply.
  Result<std::string> Get(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    RESHARD_ASSIGN_OR_RETURN(
        RedisReply r, Run({"GET", KeyOf(key)}, "read " + std::string(key)));
    // An empty value is absent, as Describe has it.
    if (r.type() != Type::kString || r.str().empty()) {
      return Status::NotFound("no object " + std::string(key));
    }
    if (r.str().front() == 'r') return std::string(r.str().substr(1));
    RESHARD_ASSIGN_OR_RETURN(Descriptor d, ParseChunked(key, r.str()));
    if (d.size > internal::kMaxRedisGetBytes) {
      return Status::ResourceExhausted(
          "object " + std::string(key) + " in " + uri_.redacted + " holds " +
          std::to_string(d.size) + " bytes, more than a whole read returns (" +
          std::to_string(internal::kMaxRedisGetBytes) + "); read it by ranges");
    }
    std::string out(d.size, '\0');
    RESHARD_RETURN_NOT_OK(
        ReadPieces(PiecesOf(key, d, 0, {{out.data(), d.size}})));
    return out;
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::string_view whole = prefix;
    if (whole.ends_with('/')) whole.remove_suffix(1);
    if (!whole.empty()) RESHARD_RETURN_NOT_OK(ValidateRecordKey(whole));
    // Pages of kListPageKeys, each from just after the last key of the
    // one before, so that no reply grows with the store.
    std::string lo = prefix.empty() ? "-" : "[" + std::string(prefix);
    const std::string hi =
        prefix.empty() ? "+" : "[" + std::string(prefix) + "\xff";
    const std::string page = std::to_string(kListPageKeys);
    std::vector<std::string> keys;
    while (true) {
      RESHARD_ASSIGN_OR_RETURN(
          RedisReply r, Run({"ZRANGEBYLEX", index_, lo, hi, "LIMIT", "0", page},
                            "list keys"));
      for (size_t i = 0; i < r.size(); ++i) {
        keys.emplace_back(r.element_str(i));
      }
      if (r.size() < kListPageKeys) return keys;
      lo = "(" + keys.back();
    }
  }

  Status Delete(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    return Eval(internal::kDeleteScript, {KeyOf(key), index_},
                {key, chunks_, std::to_string(internal::kMinRedisChunkBytes),
                 std::to_string(internal::kMaxRedisChunkBytes),
                 std::to_string(internal::kMaxRedisChunks)},
                "delete " + std::string(key))
        .status();
  }

  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    uint64_t total = 0;
    for (const ConstBuffer& p : parts) total += p.size;
    if (total <= kInlineObjectBytes) {
      std::string v = "r";
      v.reserve(total + 1);
      for (const ConstBuffer& p : parts) {
        v.append(static_cast<const char*>(p.data), p.size);
      }
      RESHARD_RETURN_NOT_OK(PublishValue(key, v));
    } else {
      RESHARD_RETURN_NOT_OK(PutChunked(key, parts, total));
    }
    return durability == Durability::kDurable ? Sync() : Status::OK();
  }

  Status Sync() override {
    if (!options_.require_durable) return Status::OK();
    if (uri_.require_fsync) RESHARD_RETURN_NOT_OK(CheckFsync());
    if (uri_.replicas == 0) return Status::OK();
    // Well within the reply timeout (the server checks timeouts of blocked
    // clients about every 100 ms), so that the server answers first.
    const int64_t wait_ms = std::max<int64_t>(1, options_.timeout.count() / 2);
    RESHARD_ASSIGN_OR_RETURN(
        RedisReply r,
        Run({"WAIT", std::to_string(uri_.replicas), std::to_string(wait_ms)},
            "wait for replicas"));
    if (r.type() != Type::kInteger ||
        r.integer() < static_cast<long long>(uri_.replicas)) {
      return Status::IOError(
          "redis " + uri_.redacted + ": only " +
          std::to_string(r.type() == Type::kInteger ? r.integer() : 0) +
          " of " + std::to_string(uri_.replicas) +
          " replicas acknowledged the writes within " +
          std::to_string(wait_ms) + " ms");
    }
    return Status::OK();
  }

  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    std::unordered_map<std::string_view, Descriptor> described;
    for (const ReadRange& r : ranges) {
      if (described.count(r.key) != 0) continue;
      RESHARD_RETURN_NOT_OK(ValidateRecordKey(r.key));
      RESHARD_ASSIGN_OR_RETURN(Descriptor d, Describe(r.key));
      described.emplace(r.key, std::move(d));
    }
    // Ranges that continue each other in one object are read as one run,
    // so a value whose bytes go to many caller rows is one GET.
    std::vector<Piece> pieces;
    for (size_t k = 0; k < ranges.size();) {
      const ReadRange& r = ranges[k];
      const Descriptor& d = described.at(r.key);
      std::vector<ReadBuffer> dests = {{r.dest, r.length}};
      for (++k; k < ranges.size() && RangeContinues(ranges[k - 1], ranges[k]);
           ++k) {
        dests.push_back({ranges[k].dest, ranges[k].length});
      }
      const uint64_t end = ranges[k - 1].offset + ranges[k - 1].length;
      if (end > d.size || end < r.offset) {
        return Status::DataLoss("object " + r.key + " is short: range [" +
                                std::to_string(r.offset) + ", " +
                                std::to_string(end) + ") is past its end (" +
                                std::to_string(d.size) + " bytes)");
      }
      for (Piece& p : PiecesOf(r.key, d, r.offset, dests)) {
        pieces.push_back(std::move(p));
      }
    }
    return ReadPieces(std::move(pieces));
  }

  Result<uint64_t> ObjectSize(std::string_view key) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    RESHARD_ASSIGN_OR_RETURN(Descriptor d, Describe(key));
    return d.size;
  }

  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override {
    RESHARD_ASSIGN_OR_RETURN(RedisReply stale,
                             Eval(internal::kStaleUploadsScript, {pending_},
                                  {std::to_string(older_than.count() * 1000)},
                                  "list stale uploads"));
    uint64_t removed = 0;
    for (size_t i = 0; i < stale.size(); ++i) {
      const std::string member(stale.element_str(i));
      const size_t space = member.find(' ');
      uint64_t n = 0;
      if (space == std::string::npos ||
          !internal::ValidRedisToken(member.substr(0, space)) ||
          !ParseU64(member.substr(space + 1), &n) ||
          n > internal::kMaxRedisChunks) {
        continue;  // not ours; never guess what to delete
      }
      RESHARD_ASSIGN_OR_RETURN(
          RedisReply r, Eval(internal::kDiscardUploadScript, {pending_},
                             {member, chunks_ + member.substr(0, space) + ":",
                              std::to_string(n)},
                             "remove a stale upload"));
      if (r.type() == Type::kInteger && r.integer() == 1) ++removed;
    }
    return removed;
  }

  const std::string& uri() const override { return uri_.redacted; }
  // A chunked object's values: a part of one is a GETRANGE, which the
  // server copies before sending it, for the round trip of the whole.
  uint64_t PreferredReadBytes() const override { return options_.chunk_bytes; }

 private:
  std::string KeyOf(std::string_view key) const {
    return uri_.prefix + ":k:" + std::string(key);
  }

  Result<std::unique_ptr<RedisConnection>> Connect() {
    return RedisConnection::Connect(uri_, options_.timeout);
  }

  Result<std::unique_ptr<RedisConnection>> Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (owner_ != ::getpid()) {
        // A forked child: the pooled sockets are its parent's too, and two
        // processes on one connection would interleave their replies.
        idle_.clear();
        owner_ = ::getpid();
      }
      if (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        return conn;
      }
    }
    return Connect();
  }

  void Release(std::unique_ptr<RedisConnection> conn) {
    if (!conn->healthy()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ != ::getpid()) return;
    idle_.push_back(std::move(conn));
  }

  // One command on a pooled connection; error replies become IOError.
  Result<RedisReply> Run(const std::vector<std::string_view>& args,
                         const std::string& what) {
    RESHARD_ASSIGN_OR_RETURN(auto conn, Acquire());
    Result<RedisReply> r = conn->Command(args);
    Release(std::move(conn));
    if (!r.ok()) return Status::IOError(what + ": " + r.status().message());
    if (r->type() == Type::kError) {
      return Status::IOError("redis " + uri_.redacted + ": cannot " + what +
                             ": " + std::string(r->str()));
    }
    return r;
  }

  Result<RedisReply> Eval(const char* script,
                          const std::vector<std::string>& keys,
                          const std::vector<std::string_view>& args,
                          const std::string& what) {
    const std::string nkeys = std::to_string(keys.size());
    std::vector<std::string_view> argv = {"EVAL", script, nkeys};
    for (const std::string& k : keys) argv.push_back(k);
    for (std::string_view a : args) argv.push_back(a);
    return Run(argv, what);
  }

  // The P:k keys of `key`'s ancestors ("a/b/c" -> a, a/b).
  std::vector<std::string> NewKeyKeys(std::string_view key) const {
    std::vector<std::string> keys = {KeyOf(key), index_, pending_};
    for (size_t slash = key.find('/'); slash != std::string_view::npos;
         slash = key.find('/', slash + 1)) {
      keys.push_back(KeyOf(key.substr(0, slash)));
    }
    return keys;
  }

  // Maps a publication script's result to a status.
  Status PublishResult(std::string_view key, const RedisReply& r) const {
    const long long code = r.type() == Type::kInteger ? r.integer() : -100;
    if (code == 1) return Status::OK();
    const std::string k(key);
    if (code == 0) return Status::AlreadyExists("record exists: " + k);
    if (code == -1) {
      return Status::IOError("object " + k +
                             " was not published: its chunks "
                             "expired or were reclaimed as stale before it "
                             "was complete");
    }
    if (code == -2) {
      return Status::InvalidArgument("key \"" + k +
                                     "\" names a directory of records");
    }
    if (code <= -3) {  // below ancestor -3 - code (0: the outermost)
      size_t slash = k.find('/');
      for (long long i = 0; i < -3 - code && slash != std::string::npos; ++i) {
        slash = k.find('/', slash + 1);
      }
      return Status::InvalidArgument("key \"" + k + "\" is below record \"" +
                                     k.substr(0, slash) + "\"");
    }
    return Status::IOError("redis " + uri_.redacted +
                           ": unexpected reply publishing " + k);
  }

  Status PublishValue(std::string_view key, std::string_view value) {
    RESHARD_ASSIGN_OR_RETURN(
        RedisReply r, Eval(internal::kPublishValueScript, NewKeyKeys(key),
                           {key, value}, "publish " + std::string(key)));
    return PublishResult(key, r);
  }

  Status PutChunked(std::string_view key, const std::vector<ConstBuffer>& parts,
                    uint64_t total);
  Status WriteChunks(const std::string& chunk_prefix,
                     const std::vector<ConstBuffer>& parts, uint64_t total,
                     uint64_t chunks);
  Result<Descriptor> Describe(std::string_view key);
  Status Malformed(std::string_view key) const {
    return Status::DataLoss("object " + std::string(key) + " in " +
                            uri_.redacted + " has a malformed descriptor");
  }
  // The descriptor of a chunked object from its value; DataLoss naming
  // the object if malformed.
  Result<Descriptor> ParseChunked(std::string_view key,
                                  std::string_view value) const;
  // The GETRANGEs of object bytes [offset, offset + total size of
  // `dests`), which receive them in order.
  std::vector<Piece> PiecesOf(std::string_view key, const Descriptor& d,
                              uint64_t offset,
                              const std::vector<ReadBuffer>& dests) const;
  Status ReadPieces(std::vector<Piece> pieces);
  Status ReadPiecesOn(RedisConnection& conn, const std::vector<Piece*>& mine);
  Status CheckFsync();

  RedisUri uri_;
  RedisStoreOptions options_;
  std::string index_, pending_, chunks_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  pid_t owner_ = ::getpid();  // the process the pooled connections are of
};

Status RedisStore::PutChunked(std::string_view key,
                              const std::vector<ConstBuffer>& parts,
                              uint64_t total) {
  RESHARD_ASSIGN_OR_RETURN(RedisReply exists, Run({"EXISTS", KeyOf(key)},
                                                  "check " + std::string(key)));
  if (exists.type() == Type::kInteger && exists.integer() == 1) {
    return Status::AlreadyExists("record exists: " + std::string(key));
  }
  const uint64_t chunks =
      (total + options_.chunk_bytes - 1) / options_.chunk_bytes;
  if (chunks > internal::kMaxRedisChunks) {
    return Status::InvalidArgument(
        "object " + std::string(key) + " of " + std::to_string(total) +
        " bytes needs more than " + std::to_string(internal::kMaxRedisChunks) +
        " chunks of " + std::to_string(options_.chunk_bytes) +
        " bytes; open the store with larger chunk_bytes");
  }
  const std::string token = RandomToken();
  const std::string member = token + " " + std::to_string(chunks);
  const std::string chunk_prefix = chunks_ + token + ":";
  RESHARD_RETURN_NOT_OK(Eval(internal::kBeginUploadScript, {pending_}, {member},
                             "begin the upload of " + std::string(key))
                            .status());
  auto discard = [&] {
    (void)Eval(internal::kDiscardUploadScript, {pending_},
               {member, chunk_prefix, std::to_string(chunks)},
               "discard an upload");
  };
  Status st = WriteChunks(chunk_prefix, parts, total, chunks);
  if (!st.ok()) {
    discard();
    return Status::IOError("cannot write object " + std::string(key) + ": " +
                           st.message());
  }
  const std::string descriptor = internal::RenderRedisDescriptor(
      {.size = total, .chunk_bytes = options_.chunk_bytes, .token = token});
  Result<RedisReply> r =
      Eval(internal::kPublishChunkedScript, NewKeyKeys(key),
           {key, descriptor, member, chunk_prefix, std::to_string(chunks)},
           "publish " + std::string(key));
  if (!r.ok()) {
    discard();  // if the script did run, the object stays whole
    return r.status();
  }
  st = PublishResult(key, *r);
  if (!st.ok() && r->integer() != -1) discard();
  return st;
}

Status RedisStore::WriteChunks(const std::string& chunk_prefix,
                               const std::vector<ConstBuffer>& parts,
                               uint64_t total, uint64_t chunks) {
  const uint32_t lanes = static_cast<uint32_t>(
      std::min<uint64_t>(options_.write_connections, chunks));
  const std::string expiry = std::to_string(kChunkExpiryMs);
  return ParallelFor(lanes, lanes, [&](size_t lane) -> Status {
    RESHARD_ASSIGN_OR_RETURN(auto conn, Acquire());
    uint64_t in_flight = 0;
    Status st;
    auto settle = [&](uint64_t keep) -> Status {
      while (in_flight > keep) {
        RESHARD_ASSIGN_OR_RETURN(RedisReply r, conn->Read());
        --in_flight;
        if (r.type() == Type::kError) {
          return Status::IOError("redis " + uri_.redacted + ": " +
                                 std::string(r.str()));
        }
      }
      return Status::OK();
    };
    for (uint64_t i = lane; i < chunks && st.ok(); i += lanes) {
      const uint64_t offset = i * options_.chunk_bytes;
      const uint64_t n = std::min(options_.chunk_bytes, total - offset);
      st = conn->AppendSetFrom(chunk_prefix + std::to_string(i), parts, offset,
                               n, expiry);
      if (st.ok()) {
        ++in_flight;
        st = settle(options_.pipeline_depth - 1);
      }
    }
    if (st.ok()) st = settle(0);
    Release(std::move(conn));
    return st;
  });
}

Result<Descriptor> RedisStore::Describe(std::string_view key) {
  RESHARD_ASSIGN_OR_RETURN(RedisReply r,
                           Eval(internal::kDescribeScript, {KeyOf(key)}, {},
                                "read " + std::string(key)));
  if (r.type() == Type::kNil) {
    return Status::NotFound("no object " + std::string(key));
  }
  Descriptor d;
  const auto corrupt = [&] { return Malformed(key); };
  if (r.type() != Type::kArray || r.size() != 2) return corrupt();
  if (r.element_str(0) == "r") {
    if (r.element_type(1) != Type::kInteger || r.element_integer(1) < 0) {
      return corrupt();
    }
    d.size = static_cast<uint64_t>(r.element_integer(1));
    return d;
  }
  return ParseChunked(key, r.element_str(1));
}

Result<Descriptor> RedisStore::ParseChunked(std::string_view key,
                                            std::string_view v) const {
  // "c<size> <chunk_bytes> <token>", within the limits of
  // redis_descriptor.h before any size is used.
  std::optional<internal::RedisDescriptor> parsed =
      internal::ParseRedisDescriptor(v);
  if (!parsed) return Malformed(key);
  Descriptor d;
  d.chunked = true;
  d.size = parsed->size;
  d.chunk_bytes = parsed->chunk_bytes;
  d.token = std::move(parsed->token);
  return d;
}

std::vector<Piece> RedisStore::PiecesOf(
    std::string_view key, const Descriptor& d, uint64_t offset,
    const std::vector<ReadBuffer>& dests) const {
  uint64_t length = 0;
  for (const ReadBuffer& b : dests) length += b.size;
  std::vector<Piece> out;
  if (length == 0) return out;
  if (!d.chunked) {  // the value is "r" + bytes
    out.push_back(
        {KeyOf(key), offset + 1, length, dests, "object " + std::string(key)});
    return out;
  }
  size_t next = 0;      // dests[next] receives the next byte
  uint64_t within = 0;  // bytes of dests[next] already assigned
  uint64_t at = offset;
  while (at < offset + length) {
    const uint64_t chunk = at / d.chunk_bytes;
    const uint64_t in_chunk = at - chunk * d.chunk_bytes;
    const uint64_t n = std::min(d.chunk_bytes - in_chunk, offset + length - at);
    const uint64_t chunk_size =
        std::min(d.chunk_bytes, d.size - chunk * d.chunk_bytes);
    Piece p{chunks_ + d.token + ":" + std::to_string(chunk),
            in_chunk,
            n,
            {},
            "object " + std::string(key) + " chunk " + std::to_string(chunk),
            in_chunk == 0 && n == chunk_size};
    for (uint64_t left = n; left > 0;) {
      if (dests[next].size == within) {
        ++next;
        within = 0;
        continue;
      }
      const uint64_t take = std::min(left, dests[next].size - within);
      p.dests.push_back(
          {static_cast<uint8_t*>(dests[next].data) + within, take});
      within += take;
      left -= take;
    }
    out.push_back(std::move(p));
    at += n;
  }
  return out;
}

Status RedisStore::ReadPieces(std::vector<Piece> pieces) {
  if (pieces.empty()) return Status::OK();
  // Spread bytes evenly: largest pieces first, each to the lightest lane.
  const uint32_t lanes = static_cast<uint32_t>(
      std::min<size_t>(options_.connections, pieces.size()));
  std::vector<std::vector<Piece*>> mine(lanes);
  std::vector<uint64_t> load(lanes, 0);
  std::vector<Piece*> order;
  for (Piece& p : pieces) order.push_back(&p);
  std::stable_sort(
      order.begin(), order.end(),
      [](const Piece* a, const Piece* b) { return a->length > b->length; });
  for (Piece* p : order) {
    const size_t lane =
        std::min_element(load.begin(), load.end()) - load.begin();
    mine[lane].push_back(p);
    load[lane] += p->length;
  }
  return ParallelFor(lanes, lanes, [&](size_t lane) -> Status {
    RESHARD_ASSIGN_OR_RETURN(auto conn, Acquire());
    Status st = ReadPiecesOn(*conn, mine[lane]);
    Release(std::move(conn));
    return st;
  });
}

Status RedisStore::ReadPiecesOn(RedisConnection& conn,
                                const std::vector<Piece*>& mine) {
  size_t sent = 0, read = 0;
  Status first;
  while (read < mine.size()) {
    while (sent < mine.size() && sent - read < options_.pipeline_depth) {
      const Piece& p = *mine[sent++];
      RESHARD_RETURN_NOT_OK(
          p.whole
              ? conn.Append({"GET", p.value_key})
              : conn.Append({"GETRANGE", p.value_key, std::to_string(p.offset),
                             std::to_string(p.offset + p.length - 1)}));
    }
    const Piece& p = *mine[read++];
    Status st = conn.ReadBulkInto(p.dests, p.what);
    if (!conn.healthy()) return st;
    if (first.ok() && !st.ok()) first = st;  // keep reading: stay in step
  }
  return first;
}

Status RedisStore::CheckFsync() {
  RESHARD_ASSIGN_OR_RETURN(auto conn, Acquire());
  auto get = [&](std::string_view name) -> Result<std::string> {
    RESHARD_ASSIGN_OR_RETURN(RedisReply r,
                             conn->Command({"CONFIG", "GET", name}));
    if (r.type() == Type::kError || r.size() != 2) {
      return Status::FailedPrecondition(
          "redis " + uri_.redacted +
          ": cannot tell whether writes are "
          "durable (CONFIG GET " +
          std::string(name) + " failed" +
          (r.type() == Type::kError ? ": " + std::string(r.str()) : "") +
          "); open it with ?sync=none to accept losing recent writes when "
          "the server restarts");
    }
    return std::string(r.element_str(1));
  };
  Result<std::string> aof = get("appendonly");
  Result<std::string> fsync = aof.ok() ? get("appendfsync") : aof.status();
  Release(std::move(conn));
  RESHARD_RETURN_NOT_OK(fsync.status());
  if (*aof == "yes" && *fsync == "always") return Status::OK();
  return Status::FailedPrecondition(
      "redis " + uri_.redacted +
      " does not make writes durable before "
      "acknowledging them (appendonly " +
      *aof + ", appendfsync " + *fsync +
      "; durable needs appendonly yes and appendfsync always); open it with "
      "?sync=none to accept losing recent writes when the server restarts");
}

}  // namespace

bool IsRedisUri(std::string_view uri) {
  return uri.starts_with("redis://") || uri.starts_with("unix://");
}

Result<std::unique_ptr<ObjectStore>> OpenRedisStore(
    std::string_view uri, const RedisStoreOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(RedisUri parsed, internal::ParseRedisUri(uri));
  auto store = std::make_unique<RedisStore>(std::move(parsed), options);
  RESHARD_RETURN_NOT_OK(store->Init());
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace reshard
