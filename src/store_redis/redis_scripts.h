// The server-side scripts of the Redis backend. Each runs atomically on the
// server, which is what makes publication create-only with one winner and
// keeps the key index in step with the keys. Key layout (P = the prefix):
//
//   P:k:<key>          a record or object: "r" + its bytes (one value), or
//                      "c<size> <chunk_bytes> <token>" (chunked object)
//   P:d:<token>:<i>    chunk i of the chunked object written under <token>
//   P:index            sorted set of every published key (List)
//   P:pending          sorted set "<token> <chunks>" of uploads in progress,
//                      scored by their start (server time, milliseconds)
//
// Chunks are written with an expiry and made persistent by the publishing
// script, so the chunks of a writer that died expire by themselves;
// RemoveStaleTemporaries removes them earlier through P:pending.

#ifndef RESHARD_STORE_REDIS_REDIS_SCRIPTS_H_
#define RESHARD_STORE_REDIS_REDIS_SCRIPTS_H_

namespace reshard::internal {

// Shared checks of a new key: KEYS[1] its P:k key, KEYS[2] the index,
// KEYS[3..] the P:k keys of its ancestors; ARGV[1] the key. Returns 0 if
// the key exists, -2 if it names a directory of keys, -3 if it is below an
// existing key, else falls through.
#define RESHARD_REDIS_NEW_KEY_CHECKS                                     \
  "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"            \
  "if #redis.call('ZRANGEBYLEX', KEYS[2], '[' .. ARGV[1] .. '/',"        \
  " '[' .. ARGV[1] .. '/\\255', 'LIMIT', 0, 1) > 0 then return -2 end\n" \
  "for i = 4, #KEYS do\n"                                                \
  "  if redis.call('EXISTS', KEYS[i]) == 1 then return -3 - i + 4 end\n" \
  "end\n"

// Publishes a one-value record or object. ARGV[2] is the value ("r" + bytes).
// Returns 1 when published, else as the checks above.
inline constexpr const char* kPublishValueScript = RESHARD_REDIS_NEW_KEY_CHECKS
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], 0, ARGV[1])\n"
    "return 1\n";

// Publishes a chunked object. KEYS[3] is P:pending (its ancestors follow
// from KEYS[4]); ARGV[2] the descriptor, ARGV[3] the pending member,
// ARGV[4] the chunk key prefix (P:d:<token>:), ARGV[5] the chunk count.
// Returns -1 if the upload was reclaimed or a chunk expired (its chunks are
// removed), 1 when published, else as the checks.
inline constexpr const char* kPublishChunkedScript =
    "if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then return -1 end\n"
    "local n = tonumber(ARGV[5])\n"
    "for i = 0, n - 1 do\n"
    "  if redis.call('EXISTS', ARGV[4] .. i) == 0 then\n"
    "    for j = 0, n - 1 do redis.call('UNLINK', ARGV[4] .. j) end\n"
    "    redis.call('ZREM', KEYS[3], ARGV[3])\n"
    "    return -1\n"
    "  end\n"
    "end\n"
    "local ancestors = {}\n"
    "for i = 4, #KEYS do ancestors[#ancestors + 1] = KEYS[i] end\n"
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "if #redis.call('ZRANGEBYLEX', KEYS[2], '[' .. ARGV[1] .. '/',"
    " '[' .. ARGV[1] .. '/\\255', 'LIMIT', 0, 1) > 0 then return -2 end\n"
    "for i, k in ipairs(ancestors) do\n"
    "  if redis.call('EXISTS', k) == 1 then return -2 - i end\n"
    "end\n"
    "for i = 0, n - 1 do redis.call('PERSIST', ARGV[4] .. i) end\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], 0, ARGV[1])\n"
    "redis.call('ZREM', KEYS[3], ARGV[3])\n"
    "return 1\n";

// Registers an upload: KEYS[1] P:pending, ARGV[1] its member. Returns the
// server time in milliseconds.
inline constexpr const char* kBeginUploadScript =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZADD', KEYS[1], now, ARGV[1])\n"
    "return now\n";

// Removes an upload's chunks and its pending entry: KEYS[1] P:pending,
// ARGV[1] the member, ARGV[2] the chunk key prefix, ARGV[3] the chunk
// count. Returns 1 if the entry was there.
inline constexpr const char* kDiscardUploadScript =
    "for i = 0, tonumber(ARGV[3]) - 1 do redis.call('UNLINK', ARGV[2] .. i) "
    "end\n"
    "return redis.call('ZREM', KEYS[1], ARGV[1])\n";

// Members of P:pending (KEYS[1]) that started more than ARGV[1]
// milliseconds ago, by the server's clock.
inline constexpr const char* kStaleUploadsScript =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf',"
    " now - tonumber(ARGV[1]))\n";

// Removes a key and, for a chunked object, its chunks: KEYS[1] its P:k
// key, KEYS[2] the index; ARGV[1] the key, ARGV[2] the chunk key prefix
// (P:d:), ARGV[3..5] the descriptor limits (redis_descriptor.h: least and
// most chunk bytes, most chunks). A descriptor within them names its
// chunks; one that breaks them (tampered) owns the chunks that exist from
// 0 on, at most ARGV[5] of them, so no descriptor can make the server loop
// without bound. Returns 1 if the key existed.
inline constexpr const char* kDeleteScript =
    "local v = redis.call('GET', KEYS[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "if not v then return 0 end\n"
    "local size, chunk, token ="
    " string.match(v, '^c([1-9]%d*) ([1-9]%d*) ([0-9a-f]+%-[0-9a-f]+)$')\n"
    "if token then\n"
    "  local most = tonumber(ARGV[5])\n"
    "  local n = nil\n"
    "  if #size <= 15 and #chunk <= 15 then\n"
    "    size = tonumber(size)\n"
    "    chunk = tonumber(chunk)\n"
    "    if chunk >= tonumber(ARGV[3]) and chunk <= tonumber(ARGV[4]) and"
    " math.ceil(size / chunk) <= most then n = math.ceil(size / chunk) end\n"
    "  end\n"
    "  local at = ARGV[2] .. token .. ':'\n"
    "  if n then\n"
    "    for i = 0, n - 1 do redis.call('UNLINK', at .. i) end\n"
    "  else\n"
    "    for i = 0, most - 1 do\n"
    "      if redis.call('UNLINK', at .. i) == 0 then break end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n";

// What a key holds, without its bytes: nil if absent, else {"r", size} or
// {"c", descriptor}. KEYS[1] its P:k key.
inline constexpr const char* kDescribeScript =
    "local t = redis.call('GETRANGE', KEYS[1], 0, 0)\n"
    "if t == '' then return false end\n"
    "if t == 'r' then return {'r', redis.call('STRLEN', KEYS[1]) - 1} end\n"
    "return {t, redis.call('GET', KEYS[1])}\n";

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REDIS_REDIS_SCRIPTS_H_
