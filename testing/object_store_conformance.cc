// The ObjectStore conformance suite (see object_store_conformance.h): every
// test runs against a fresh store from the backend's factory and checks
// exact bytes and exact status codes; messages must name the key. One
// DISABLED test states a rule the fs backend breaks today (see its comment).

#include "testing/object_store_conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <latch>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "util/printable.h"

namespace reshard::testing {
namespace {

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::reshard::Status _st = (expr);                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (false)

#define EXPECT_OK(expr)                                       \
  do {                                                        \
    const ::reshard::Status _st = (expr);                     \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (false)

using Keys = std::vector<std::string>;

constexpr char kSentinel = '\xa5';
constexpr size_t kGuard = 16;

// `n` pseudo-random bytes determined by `seed`.
std::string Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

ConstBuffer Buf(std::string_view s) { return ConstBuffer{s.data(), s.size()}; }

// Where `got` first differs from `want` (a size difference counts); -1 if
// they are equal. Keeps failure output short for large buffers.
int64_t FirstMismatch(std::string_view got, std::string_view want) {
  const size_t n = std::min(got.size(), want.size());
  const auto [g, w] = std::mismatch(got.begin(), got.begin() + n, want.begin());
  if (g != got.begin() + n) return g - got.begin();
  return got.size() == want.size() ? -1 : static_cast<int64_t>(n);
}

// Messages quote keys as Printable shows them (control bytes escaped).
bool Names(const Status& st, std::string_view key) {
  return st.message().find(internal::Printable(key)) != std::string::npos;
}

// [offset, offset + length) of `key`, read through ReadRanges.
Result<std::string> Read(ObjectStore& store, const std::string& key,
                         uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  RESHARD_RETURN_NOT_OK(
      store.ReadRanges({ReadRange{key, offset, length, out.data()}}));
  return out;
}

Keys ListOrDie(ObjectStore& store, std::string_view prefix) {
  auto keys = store.List(prefix);
  EXPECT_TRUE(keys.ok()) << "List(" << prefix
                         << "): " << keys.status().ToString();
  return keys.ok() ? *keys : Keys{};
}

// Checks every view of object `key`: ObjectSize, Get and a whole ReadRanges.
void ExpectObject(ObjectStore& store, const std::string& key,
                  std::string_view want) {
  auto size = store.ObjectSize(key);
  ASSERT_TRUE(size.ok()) << key << ": " << size.status().ToString();
  EXPECT_EQ(*size, want.size()) << key;
  auto got = store.Get(key);
  ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
  EXPECT_EQ(FirstMismatch(*got, want), -1) << key << " via Get";
  auto read = Read(store, key, 0, want.size());
  ASSERT_TRUE(read.ok()) << key << ": " << read.status().ToString();
  EXPECT_EQ(FirstMismatch(*read, want), -1) << key << " via ReadRanges";
}

// One range of a source into its own buffer, between sentinel guards, at an
// unaligned position.
struct Target {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;
  size_t pad = 0;
  std::string buf;
};

Target MakeTarget(std::string key, uint64_t offset, uint64_t length,
                  size_t pad) {
  Target t{std::move(key), offset, length, pad, {}};
  t.buf.assign(pad + length + kGuard, kSentinel);
  return t;
}

std::vector<ReadRange> RangesOf(std::vector<Target>& targets) {
  std::vector<ReadRange> ranges;
  for (Target& t : targets) {
    ranges.push_back({t.key, t.offset, t.length, t.buf.data() + t.pad});
  }
  return ranges;
}

// Every target holds exactly its source bytes and its guards are intact.
void ExpectTargets(const std::vector<Target>& targets,
                   const std::map<std::string, std::string>& sources) {
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    const std::string_view buf = t.buf;
    const std::string_view want =
        std::string_view(sources.at(t.key)).substr(t.offset, t.length);
    EXPECT_EQ(FirstMismatch(buf.substr(t.pad, t.length), want), -1)
        << "range " << i << ": " << t.key << " [" << t.offset << ", "
        << t.offset + t.length << ")";
    EXPECT_EQ(buf.substr(0, t.pad), std::string(t.pad, kSentinel))
        << "range " << i << " wrote before its destination";
    EXPECT_EQ(buf.substr(t.pad + t.length), std::string(kGuard, kSentinel))
        << "range " << i << " wrote past its destination";
  }
}

// `n` random ranges of `sources` (offsets and lengths anywhere in the
// object, zero-length ones included).
std::vector<Target> RandomTargets(
    const std::map<std::string, std::string>& sources, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<const std::string*> keys;
  for (const auto& [key, bytes] : sources) keys.push_back(&key);
  std::vector<Target> targets;
  for (int i = 0; i < n; ++i) {
    const std::string& key = *keys[rng() % keys.size()];
    const uint64_t size = sources.at(key).size();
    const uint64_t offset = rng() % (size + 1);
    uint64_t length = rng() % (size - offset + 1);
    if (i % 3 != 0) length = std::min<uint64_t>(length, rng() % 4096);
    targets.push_back(MakeTarget(key, offset, length, rng() % 16));
  }
  return targets;
}

}  // namespace

void ObjectStoreConformance::SetUp() {
  store_ = GetParam()();
  ASSERT_NE(store_, nullptr) << "the factory returned no store";
  ASSERT_EQ(ListOrDie(*store_, ""), Keys{}) << "the store is not fresh";
}

void ObjectStoreConformance::TearDown() { store_.reset(); }

TEST_P(ObjectStoreConformance, FreshStoresAreEmptyIndependentAndHaveAUri) {
  const std::string uri = store_->uri();
  EXPECT_FALSE(uri.empty());
  ASSERT_OK(store_->Put("k", "v"));
  EXPECT_EQ(store_->uri(), uri);

  std::unique_ptr<ObjectStore> other = GetParam()();
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->uri().empty());
  EXPECT_EQ(ListOrDie(*other, ""), Keys{});
  EXPECT_EQ(other->Get("k").status().code(), StatusCode::kNotFound);
  ASSERT_OK(other->Put("k", "other"));
  EXPECT_EQ(*store_->Get("k"), "v");
}

TEST_P(ObjectStoreConformance, PutObjectWritesTheExactConcatenationOfParts) {
  const std::vector<ConstBuffer> parts = {
      ConstBuffer{}, Buf("abc"), Buf(""),      Buf("defgh"),
      ConstBuffer{}, Buf("i"),   ConstBuffer{}};
  ASSERT_OK(store_->PutObject("obj/letters", parts));
  ExpectObject(*store_, "obj/letters", "abcdefghi");

  // Every single byte, in one call, each into its own buffer.
  std::vector<Target> targets;
  for (uint64_t i = 0; i < 9; ++i) {
    targets.push_back(MakeTarget("obj/letters", i, 1, i % 4));
  }
  std::vector<ReadRange> ranges = RangesOf(targets);
  ASSERT_OK(store_->ReadRanges(ranges));
  ExpectTargets(targets, {{"obj/letters", "abcdefghi"}});

  // Binary bytes (NULs included) split unevenly across parts.
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += std::string("\0\0\xff\0", 4);
  const std::string_view v = bytes;
  ASSERT_OK(store_->PutObject(
      "obj/binary", {Buf(v.substr(0, 1)), Buf(v.substr(1, 99)), Buf(""),
                     Buf(v.substr(100, 155)), Buf(v.substr(255))}));
  ExpectObject(*store_, "obj/binary", bytes);
}

TEST_P(ObjectStoreConformance, ZeroByteObjects) {
  ASSERT_OK(store_->PutObject("zero/no-parts", {}));
  ASSERT_OK(store_->PutObject("zero/empty-parts",
                              {ConstBuffer{}, Buf(""), ConstBuffer{}}));
  ASSERT_OK(store_->Put("zero/record", ""));
  const Keys keys = {"zero/empty-parts", "zero/no-parts", "zero/record"};
  EXPECT_EQ(ListOrDie(*store_, "zero/"), keys);
  for (const std::string& key : keys) {
    ExpectObject(*store_, key, "");
    std::string dest(4, kSentinel);
    ASSERT_OK(store_->ReadRanges({ReadRange{key, 0, 0, dest.data()}}));
    EXPECT_EQ(dest, std::string(4, kSentinel));
    const Status st =
        store_->ReadRanges({ReadRange{key, 0, 1, dest.data() + 1}});
    EXPECT_FALSE(st.ok()) << key;
    EXPECT_TRUE(Names(st, key)) << st.ToString();
  }
}

TEST_P(ObjectStoreConformance, SixtyFourMebibyteObjectFromOddPartsRoundTrips) {
  constexpr uint64_t kSize = uint64_t{64} << 20;
  const std::string a = Pattern(1, 21'000'037);
  const std::string b = Pattern(2, 13'131'313);
  const std::string c = Pattern(3, kSize - a.size() - b.size());
  ASSERT_OK(store_->PutObject("big/object", {Buf(a), Buf(b), Buf(c)}));
  const std::string want = a + b + c;
  ASSERT_EQ(want.size(), kSize);
  ExpectObject(*store_, "big/object", want);

  // Ranges straddling the part boundaries and the object's last bytes.
  std::vector<Target> targets = {
      MakeTarget("big/object", a.size() - 5, 10, 1),
      MakeTarget("big/object", a.size() + b.size() - 3, 7, 3),
      MakeTarget("big/object", kSize - 7, 7, 5),
      MakeTarget("big/object", 12'345, 40'000'000, 7)};
  std::vector<ReadRange> ranges = RangesOf(targets);
  ASSERT_OK(store_->ReadRanges(ranges));
  ExpectTargets(targets, {{"big/object", want}});
}

TEST_P(ObjectStoreConformance, ObjectsAndRecordsAreCreateOnly) {
  const std::string first = Pattern(7, 1000);
  ASSERT_OK(store_->PutObject("k/obj", {Buf(first)}));
  const std::string longer = Pattern(8, 5000);
  for (const Status& st :
       {store_->PutObject("k/obj", {Buf(longer), Buf("x")}),
        store_->PutObject("k/obj", {}), store_->Put("k/obj", "short")}) {
    EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
    EXPECT_TRUE(Names(st, "k/obj")) << st.ToString();
  }
  ExpectObject(*store_, "k/obj", first);

  ASSERT_OK(store_->Put("k/rec", "record"));
  for (const Status& st :
       {store_->Put("k/rec", "again"), store_->PutObject("k/rec", {})}) {
    EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
    EXPECT_TRUE(Names(st, "k/rec")) << st.ToString();
  }
  ExpectObject(*store_, "k/rec", "record");
  EXPECT_EQ(ListOrDie(*store_, ""), (Keys{"k/obj", "k/rec"}));
}

TEST_P(ObjectStoreConformance, NonDurablePutsAreCompleteAndCreateOnly) {
  ASSERT_OK(store_->Sync());  // nothing written yet
  const std::string bytes = Pattern(71, 100'000);
  const std::string_view v = bytes;
  ASSERT_OK(store_->PutObject("nd/a", {Buf(v.substr(0, 3)), Buf(v.substr(3))},
                              Durability::kAtNextSync));
  ASSERT_OK(store_->PutObject("nd/b/zero", {}, Durability::kAtNextSync));
  ExpectObject(*store_, "nd/a", bytes);
  ExpectObject(*store_, "nd/b/zero", "");
  EXPECT_EQ(ListOrDie(*store_, "nd/"), (Keys{"nd/a", "nd/b/zero"}));
  for (const Status& st :
       {store_->PutObject("nd/a", {Buf("x")}, Durability::kAtNextSync),
        store_->PutObject("nd/a", {Buf("x")}, Durability::kDurable),
        store_->Put("nd/a", "x")}) {
    EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
    EXPECT_TRUE(Names(st, "nd/a")) << st.ToString();
  }
  ASSERT_OK(store_->Put("nd/rec", "record"));
  EXPECT_EQ(store_->PutObject("nd/rec", {}, Durability::kAtNextSync).code(),
            StatusCode::kAlreadyExists);
  const Status invalid =
      store_->PutObject("nd//bad", {Buf("x")}, Durability::kAtNextSync);
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument) << invalid.ToString();
  ASSERT_OK(store_->Sync());
  ASSERT_OK(store_->Sync());
  ExpectObject(*store_, "nd/a", bytes);
  ExpectObject(*store_, "nd/rec", "record");
  ASSERT_OK(store_->Delete("nd/a"));
  ASSERT_OK(store_->PutObject("nd/a", {Buf("again")}, Durability::kAtNextSync));
  ExpectObject(*store_, "nd/a", "again");
}

TEST_P(ObjectStoreConformance, ObjectSizeIsExactAndNotFoundWhenMissing) {
  for (uint64_t size : {0, 1, 7, 4096, 4097, (1 << 20) + 3}) {
    const std::string key = "size/" + std::to_string(size);
    const std::string bytes = Pattern(size, size);
    ASSERT_OK(store_->PutObject(
        key, {Buf(std::string_view(bytes).substr(0, size / 2)),
              Buf(std::string_view(bytes).substr(size / 2))}));
    auto got = store_->ObjectSize(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_EQ(*got, size);
  }
  // Missing keys, a key that is only a prefix of others, and a key below an
  // object.
  for (const std::string key :
       {"size/missing", "no/such/key", "size", "size/1/below"}) {
    auto got = store_->ObjectSize(key);
    ASSERT_FALSE(got.ok()) << key;
    EXPECT_EQ(got.status().code(), StatusCode::kNotFound)
        << got.status().ToString();
    EXPECT_TRUE(Names(got.status(), key)) << got.status().ToString();
  }
}

TEST_P(ObjectStoreConformance, ReadRangesOfOneObjectIntoDistinctBuffers) {
  const std::map<std::string, std::string> sources = {
      {"r/one", Pattern(11, (1 << 20) + 13)}};
  ASSERT_OK(store_->PutObject("r/one", {Buf(sources.at("r/one"))}));
  std::vector<Target> targets = RandomTargets(sources, 300, 1);
  std::vector<ReadRange> ranges = RangesOf(targets);
  ASSERT_OK(store_->ReadRanges(ranges));
  ExpectTargets(targets, sources);
}

// Ranges that continue each other (a strided load reading rows in place)
// may be served as one read; each must still land in its own buffer.
// Runs cross the 4 MiB value boundary of chunked backends, switch objects
// and hold zero-length ranges.
TEST_P(ObjectStoreConformance, ReadRangesThatContinueEachOtherFillOwnBuffers) {
  const std::map<std::string, std::string> sources = {
      {"c/big", Pattern(61, (9 << 20) + 7)}, {"c/small", Pattern(62, 5000)}};
  for (const auto& [key, bytes] : sources) {
    ASSERT_OK(store_->PutObject(key, {Buf(bytes)}));
  }
  std::mt19937_64 rng(63);
  std::vector<Target> targets;
  uint64_t at = 0;
  const uint64_t size = sources.at("c/big").size();
  while (at < size) {
    uint64_t n = std::min<uint64_t>(size - at, 1 + rng() % 70'000);
    if (rng() % 10 == 0) n = 0;
    targets.push_back(MakeTarget("c/big", at, n, rng() % 5));
    at += n;
    if (rng() % 40 == 0) {  // another object between two runs
      targets.push_back(MakeTarget("c/small", rng() % 4000, 1000, 1));
    }
  }
  std::vector<ReadRange> ranges = RangesOf(targets);
  ASSERT_OK(store_->ReadRanges(ranges));
  ExpectTargets(targets, sources);
  // A run whose last range passes the end fails naming the object.
  std::string dest(6000, kSentinel);
  const Status st =
      store_->ReadRanges({{"c/small", 0, 3000, dest.data()},
                          {"c/small", 3000, 2001, dest.data() + 3000}});
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Names(st, "c/small")) << st.ToString();
}

TEST_P(ObjectStoreConformance, ReadRangesOfSeveralObjectsInOneCall) {
  const std::map<std::string, std::string> sources = {
      {"r/a", Pattern(21, (1 << 20) + 13)},
      {"r/b", Pattern(22, 70'001)},
      {"r/c/d", Pattern(23, 4096)},
      {"r/e", Pattern(24, 1)}};
  for (const auto& [key, bytes] : sources) {
    const std::string_view v = bytes;
    ASSERT_OK(store_->PutObject(
        key, {Buf(v.substr(0, v.size() / 3)), Buf(v.substr(v.size() / 3))}));
  }
  ASSERT_OK(store_->Put("r/record", "a small record"));
  std::map<std::string, std::string> all = sources;
  all["r/record"] = "a small record";
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    std::vector<Target> targets = RandomTargets(all, 400, seed);
    std::vector<ReadRange> ranges = RangesOf(targets);
    ASSERT_OK(store_->ReadRanges(ranges));
    ExpectTargets(targets, all);
  }
  EXPECT_OK(store_->ReadRanges({}));
}

TEST_P(ObjectStoreConformance, ReadRangesIntoUnalignedDestinations) {
  const std::string bytes = Pattern(31, 100'003);
  ASSERT_OK(store_->PutObject("u/obj", {Buf(bytes)}));
  std::vector<char> storage(2 * 70'000 + 256);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(storage.data());
  char* const base = storage.data() + ((64 - raw % 64) % 64);
  for (size_t misalign = 1; misalign < 64; misalign += 2) {
    std::fill(storage.begin(), storage.end(), kSentinel);
    const uint64_t offset = 3 * misalign + 1;
    const uint64_t length = 65'537 + misalign;
    char* const first = base + misalign;
    char* const second = base + 70'000 + 64 + misalign;
    ASSERT_OK(store_->ReadRanges({{"u/obj", offset, length, first},
                                  {"u/obj", 99'999 - misalign, 4, second}}));
    EXPECT_EQ(FirstMismatch(std::string_view(first, length),
                            std::string_view(bytes).substr(offset, length)),
              -1)
        << "misalign " << misalign;
    EXPECT_EQ(std::string_view(second, 4),
              std::string_view(bytes).substr(99'999 - misalign, 4));
    EXPECT_EQ(first[-1], kSentinel);
    EXPECT_EQ(first[length], kSentinel);
  }
}

TEST_P(ObjectStoreConformance, ZeroLengthRangesSucceedAndWriteNothing) {
  const std::string bytes = Pattern(41, 100);
  ASSERT_OK(store_->PutObject("z/obj", {Buf(bytes)}));
  std::vector<Target> targets = {
      MakeTarget("z/obj", 0, 0, 1), MakeTarget("z/obj", 50, 0, 2),
      MakeTarget("z/obj", 100, 0, 3), MakeTarget("z/obj", 10, 20, 4),
      MakeTarget("z/obj", 99, 1, 5)};
  std::vector<ReadRange> ranges = RangesOf(targets);
  ASSERT_OK(store_->ReadRanges(ranges));
  ExpectTargets(targets, {{"z/obj", bytes}});
}

TEST_P(ObjectStoreConformance, ReadRangesPastTheEndFailAndNameTheKey) {
  const std::string bytes = Pattern(51, 100);
  ASSERT_OK(store_->PutObject("short/obj", {Buf(bytes)}));
  std::string dest(256, kSentinel);
  for (const auto& [offset, length] :
       std::vector<std::pair<uint64_t, uint64_t>>{
           {90, 11}, {0, 101}, {100, 1}, {150, 10}}) {
    const Status st =
        store_->ReadRanges({{"short/obj", 0, 10, dest.data()},
                            {"short/obj", offset, length, dest.data() + 10}});
    EXPECT_FALSE(st.ok()) << "[" << offset << ", " << offset + length << ")";
    EXPECT_TRUE(Names(st, "short/obj")) << st.ToString();
  }
}

TEST_P(ObjectStoreConformance, ReadRangesOfMissingKeysAreNotFound) {
  ASSERT_OK(store_->PutObject("here/obj", {Buf("0123456789")}));
  std::string dest(16, kSentinel);
  for (const std::string key :
       {"missing/key", "here/other", "here/obj/below"}) {
    for (uint64_t length : {0, 1}) {
      const Status st = store_->ReadRanges(
          {{"here/obj", 0, 4, dest.data()}, {key, 0, length, dest.data() + 8}});
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
      EXPECT_TRUE(Names(st, key)) << st.ToString();
    }
  }
}

// DISABLED: the fs backend fails it today (Get and ReadRanges of "d" give
// IOError "Is a directory", a zero-length range of "d" succeeds, Delete("d")
// gives IOError) although "d" names no object.
TEST_P(ObjectStoreConformance, KeysThatOnlyPrefixOthersAreAbsent) {
  ASSERT_OK(store_->PutObject("d/x", {Buf("x")}));
  char byte = 0;
  const Status statuses[] = {store_->Get("d").status(),
                             store_->ObjectSize("d").status(),
                             store_->ReadRanges({{"d", 0, 1, &byte}}),
                             store_->ReadRanges({{"d", 0, 0, &byte}})};
  for (const Status& st : statuses) {
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  }
  EXPECT_OK(store_->Delete("d"));
  ExpectObject(*store_, "d/x", "x");
}

TEST_P(ObjectStoreConformance, ListSeesObjectsAndRecordsSorted) {
  ASSERT_OK(store_->Put("l/b", "record"));
  ASSERT_OK(store_->PutObject("l/a", {Buf("object")}));
  ASSERT_OK(store_->PutObject("l/c/d", {Buf("deep"), Buf("object")}));
  ASSERT_OK(store_->Put("l/c-e", "record"));
  ASSERT_OK(store_->PutObject("l/c.f", {}));
  ASSERT_OK(store_->Put("l0", "record"));
  ASSERT_OK(store_->PutObject("m/x", {Buf("object")}));
  // Byte order: '-' < '.' < '/' < '0'.
  EXPECT_EQ(ListOrDie(*store_, "l/"),
            (Keys{"l/a", "l/b", "l/c-e", "l/c.f", "l/c/d"}));
  EXPECT_EQ(ListOrDie(*store_, "l"),
            (Keys{"l/a", "l/b", "l/c-e", "l/c.f", "l/c/d", "l0"}));
  EXPECT_EQ(ListOrDie(*store_, "l/c"), (Keys{"l/c-e", "l/c.f", "l/c/d"}));
  EXPECT_EQ(ListOrDie(*store_, "l/c/"), (Keys{"l/c/d"}));
  EXPECT_EQ(ListOrDie(*store_, "l/a"), (Keys{"l/a"}));
  EXPECT_EQ(ListOrDie(*store_, ""),
            (Keys{"l/a", "l/b", "l/c-e", "l/c.f", "l/c/d", "l0", "m/x"}));
  EXPECT_EQ(ListOrDie(*store_, "nothing/"), Keys{});
  EXPECT_EQ(ListOrDie(*store_, "l/a/"), Keys{});
}

TEST_P(ObjectStoreConformance, DeleteThenPutAgain) {
  ASSERT_OK(store_->PutObject("d/obj", {Buf(Pattern(61, 5000))}));
  ASSERT_OK(store_->Put("d/sibling", "stays"));
  ASSERT_OK(store_->Delete("d/obj"));
  EXPECT_EQ(store_->ObjectSize("d/obj").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("d/obj").status().code(), StatusCode::kNotFound);
  char byte = 0;
  EXPECT_EQ(store_->ReadRanges({{"d/obj", 0, 1, &byte}}).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ListOrDie(*store_, "d/"), Keys{"d/sibling"});
  EXPECT_OK(store_->Delete("d/obj"));  // absent: OK
  EXPECT_OK(store_->Delete("never/there"));

  const std::string second = Pattern(62, 77);
  ASSERT_OK(store_->PutObject("d/obj", {Buf(second)}));
  ExpectObject(*store_, "d/obj", second);
  ASSERT_OK(store_->Delete("d/sibling"));
  ASSERT_OK(store_->PutObject("d/sibling", {Buf("now an object")}));
  ExpectObject(*store_, "d/sibling", "now an object");
  ASSERT_OK(store_->Delete("d/obj"));
  ASSERT_OK(store_->Delete("d/sibling"));
  EXPECT_EQ(ListOrDie(*store_, ""), Keys{});
}

TEST_P(ObjectStoreConformance, ObjectsAndRecordsShareOneKeySpace) {
  ASSERT_OK(store_->Put("s/rec", "value"));
  Status st = store_->PutObject("s/rec", {Buf("object bytes")});
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  ExpectObject(*store_, "s/rec", "value");
  EXPECT_EQ(*Read(*store_, "s/rec", 1, 3), "alu");

  ASSERT_OK(store_->PutObject("s/obj", {Buf("ob"), Buf("ject")}));
  st = store_->Put("s/obj", "record bytes");
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  ExpectObject(*store_, "s/obj", "object");
  EXPECT_EQ(ListOrDie(*store_, "s/"), (Keys{"s/obj", "s/rec"}));

  ASSERT_OK(store_->Delete("s/obj"));
  ASSERT_OK(store_->Put("s/obj", "record now"));
  ExpectObject(*store_, "s/obj", "record now");
}

TEST_P(ObjectStoreConformance, InvalidKeysAreRejectedByEveryMethod) {
  const std::vector<std::string> keys = {
      "",     "/",   "/a",   "a/",     "a//b",     ".",
      "..",   ".x",  "a/.b", "a/../b", "a b",      "a\tb",
      "a\\b", "a:b", "a*",   "a?",     "\xc3\xa4", std::string("a\0b", 3)};
  char byte = 0;
  for (const std::string& key : keys) {
    SCOPED_TRACE("key \"" + key + "\"");
    const std::vector<Status> statuses = {
        store_->Put(key, "v"),
        store_->PutObject(key, {Buf("v")}),
        store_->PutObject(key, {Buf("v")}, Durability::kAtNextSync),
        store_->Get(key).status(),
        store_->ObjectSize(key).status(),
        store_->Delete(key),
        store_->ReadRanges({{key, 0, 1, &byte}}),
        store_->ReadRanges({{key, 0, 0, &byte}})};
    for (size_t i = 0; i < statuses.size(); ++i) {
      EXPECT_EQ(statuses[i].code(), StatusCode::kInvalidArgument)
          << "method " << i << ": " << statuses[i].ToString();
      EXPECT_TRUE(Names(statuses[i], key)) << statuses[i].ToString();
    }
  }
  // Prefixes that no valid key can start with.
  for (const std::string prefix : {"/a", "a//", ".x", "../", "a b"}) {
    EXPECT_EQ(store_->List(prefix).status().code(),
              StatusCode::kInvalidArgument)
        << "List(\"" << prefix << "\")";
  }
  EXPECT_EQ(ListOrDie(*store_, ""), Keys{});
}

TEST_P(ObjectStoreConformance, ConcurrentWritersAndReadersOfDistinctKeys) {
  constexpr int kThreads = 8;
  constexpr int kObjects = 12;
  std::vector<std::map<std::string, std::string>> sources(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(t);
    for (int i = 0; i < kObjects; ++i) {
      const std::string key =
          "c/t" + std::to_string(t) + "/obj" + std::to_string(i);
      sources[t][key] = Pattern(100 * t + i, rng() % 300'000);
    }
  }
  std::vector<std::vector<std::string>> errors(kThreads);
  std::latch published(kThreads);
  auto worker = [&](int t) {
    auto fail = [&](std::string what) { errors[t].push_back(std::move(what)); };
    std::mt19937_64 rng(1000 + t);
    for (const auto& [key, bytes] : sources[t]) {
      const std::string_view v = bytes;
      const size_t cut1 = rng() % (v.size() + 1);
      const size_t cut2 = cut1 + rng() % (v.size() - cut1 + 1);
      const Status st = store_->PutObject(
          key,
          {Buf(v.substr(0, cut1)), Buf(v.substr(cut1, cut2 - cut1)),
           Buf(v.substr(cut2))},
          t % 2 == 0 ? Durability::kDurable : Durability::kAtNextSync);
      if (!st.ok()) fail("PutObject " + key + ": " + st.ToString());
    }
    if (Status st = store_->Sync(); !st.ok()) fail("Sync: " + st.ToString());
    std::vector<Target> own = RandomTargets(sources[t], 200, t);
    for (const auto& [key, bytes] : sources[t]) {
      own.push_back(MakeTarget(key, 0, bytes.size(), t % 8));
    }
    std::vector<ReadRange> ranges = RangesOf(own);
    if (Status st = store_->ReadRanges(ranges); !st.ok()) {
      fail("ReadRanges: " + st.ToString());
    }
    for (const Target& target : own) {
      if (std::string_view(target.buf).substr(target.pad, target.length) !=
          std::string_view(sources[t].at(target.key))
              .substr(target.offset, target.length)) {
        fail("wrong bytes in " + target.key);
      }
    }
    published.arrive_and_wait();
    // Everyone's objects, while the others read too.
    for (int u = 0; u < kThreads; ++u) {
      for (const auto& [key, bytes] : sources[u]) {
        auto got = Read(*store_, key, 0, bytes.size());
        if (!got.ok() || *got != bytes) fail("cannot read back " + key);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], std::vector<std::string>{}) << "thread " << t;
    Keys want;
    for (const auto& [key, bytes] : sources[t]) want.push_back(key);
    EXPECT_EQ(ListOrDie(*store_, "c/t" + std::to_string(t) + "/"), want);
  }
}

TEST_P(ObjectStoreConformance, RacingWritersOfOneKeyHaveExactlyOneWinner) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string key = "race/" + std::to_string(round);
    std::vector<std::string> contents;
    for (int t = 0; t < kThreads; ++t) {
      contents.push_back(Pattern(round * 100 + t, 200'000 + 1000 * t + round));
    }
    std::vector<Status> statuses(kThreads);
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::string_view v = contents[t];
        start.arrive_and_wait();
        statuses[t] = store_->PutObject(
            key, {Buf(v.substr(0, 4097)), Buf(v.substr(4097))},
            t % 2 == 0 ? Durability::kDurable : Durability::kAtNextSync);
      });
    }
    for (std::thread& thread : threads) thread.join();
    int winner = -1;
    for (int t = 0; t < kThreads; ++t) {
      if (statuses[t].ok()) {
        EXPECT_EQ(winner, -1) << "two winners in round " << round;
        winner = t;
      } else {
        EXPECT_EQ(statuses[t].code(), StatusCode::kAlreadyExists)
            << statuses[t].ToString();
        EXPECT_TRUE(Names(statuses[t], key)) << statuses[t].ToString();
      }
    }
    ASSERT_NE(winner, -1) << "no winner in round " << round;
    ExpectObject(*store_, key, contents[winner]);
  }
  Keys want;
  for (int round = 0; round < kRounds; ++round) {
    want.push_back("race/" + std::to_string(round));
  }
  EXPECT_EQ(ListOrDie(*store_, "race/"), want);
}

}  // namespace reshard::testing
