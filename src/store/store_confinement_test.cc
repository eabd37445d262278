// Store confinement and corrupt-revision tolerance (docs/store-format.md,
// "Confinement and corrupt revisions"):
//  - the fs backend never follows a symbolic link below the store root:
//    reads, writes, List, Delete and the temporary sweep through or at a
//    link fail with DataLoss naming it, list it without descending, or
//    remove the link itself; a FIFO at a key never blocks a read;
//  - gc of an abandoned upload whose payload/<txn> is a link, and rm of a
//    revision whose payload/<txn> was replaced by a link, leave the linked
//    directory alone; verify refuses a payload behind a link;
//  - a tampered revision (garbage manifest, a manifest naming another
//    revision's group, a manifest that is a link) is listed as CORRUPT,
//    verify/gc carry on with the others, and rm removes it, touching only
//    keys under its own revision;
//  - links planted at every directory level of the key scheme, then every
//    store operation: a snapshot of the sentinel directory the links point
//    to (every path, type, size, content hash and mtime) is unchanged.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "reshard/placement.h"
#include "reshard/sdk/object_store.h"
#include "reshard/store_uri.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::StatusIs;
namespace fs = std::filesystem;

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Every entry under `dir` (and `dir` itself): type, size, content hash and
// mtime, never following a link.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  auto add = [&](const fs::path& p) {
    struct stat sb;
    if (::lstat(p.c_str(), &sb) != 0) {
      out[p.string()] = "lstat failed";
      return;
    }
    std::string entry = std::to_string(sb.st_mode) + " " +
                        std::to_string(sb.st_size) + " " +
                        std::to_string(sb.st_mtim.tv_sec) + "." +
                        std::to_string(sb.st_mtim.tv_nsec);
    if (S_ISREG(sb.st_mode)) {
      entry += " " + internal::Sha256Hex(ReadFile(p.string()));
    } else if (S_ISLNK(sb.st_mode)) {
      entry += " -> " + fs::read_symlink(p).string();
    }
    out[p.string()] = entry;
  };
  add(dir);
  for (const auto& e : fs::recursive_directory_iterator(dir)) add(e.path());
  return out;
}

// A store directory and, beside it, a sentinel directory full of files the
// store must never touch.
class Fixture {
 public:
  Fixture()
      : store_dir_(dir_.path() + "/store"),
        sentinel_(dir_.path() + "/sentinel") {
    fs::create_directories(store_dir_);
    fs::create_directories(sentinel_ + "/sub/deeper");
    WriteFile(sentinel_ + "/file", "sentinel file");
    WriteFile(sentinel_ + "/sub/file2", "sentinel file 2");
    WriteFile(sentinel_ + "/sub/deeper/file3", "sentinel file 3");
    WriteFile(sentinel_ + "/manifest", "not a manifest");
    WriteFile(sentinel_ + "/started", "0");
    // An old "temporary" the sweep would remove if it walked in here.
    WriteFile(sentinel_ + "/.tmp.host.1.2.3", "partial");
    fs::last_write_time(
        sentinel_ + "/.tmp.host.1.2.3",
        fs::file_time_type::clock::now() - std::chrono::hours(24));
    backend_ = std::shared_ptr<ObjectStore>(
        Must(OpenObjectStore("fs://" + store_dir_)));
  }

  WeightStore Open(WeightStoreOptions options = {}) const {
    return Must(WeightStore::Open(backend_, std::move(options)));
  }
  ObjectStore& backend() const { return *backend_; }
  const std::string& store_dir() const { return store_dir_; }
  const std::string& sentinel() const { return sentinel_; }
  std::string PathOf(const std::string& key) const {
    return store_dir_ + "/" + key;
  }
  // Replaces the store entry at `key` (a file or a directory) by a link to
  // `target`.
  void LinkAt(const std::string& key, const std::string& target) const {
    fs::remove_all(PathOf(key));
    fs::create_directories(fs::path(PathOf(key)).parent_path());
    fs::create_symlink(target, PathOf(key));
  }
  std::vector<std::string> Keys(const std::string& prefix) const {
    return Must(backend_->List(prefix));
  }

 private:
  testing::TempDir dir_{"reshard-confinement-test"};
  std::string store_dir_;
  std::string sentinel_;
  std::shared_ptr<ObjectStore> backend_;
};

// Every fs-backend operation on a key that is, or runs through, a link.
TEST(FsConfinementTest, LinksAreNeverFollowed) {
  Fixture f;
  ObjectStore& b = f.backend();
  const auto before = Snapshot(f.sentinel());
  f.LinkAt("a/leaf", f.sentinel() + "/file");  // a link where a record is
  f.LinkAt("d", f.sentinel());                 // a link where a directory is
  MustOk(b.Put("a/real", "real"));

  const std::string leaf_error =
      "cannot read record a/leaf: a/leaf is a symbolic link (a store never "
      "follows links)";
  auto got = b.Get("a/leaf");
  EXPECT_THAT(got, StatusIs(StatusCode::kDataLoss, leaf_error));
  auto through = b.Get("d/file");
  EXPECT_THAT(
      through,
      StatusIs(StatusCode::kDataLoss,
               "cannot read record d/file: d is a symbolic link (a store never "
               "follows links)"));
  auto size = b.ObjectSize("d/file");
  EXPECT_THAT(
      size, StatusIs(StatusCode::kDataLoss, HasSubstr("d is a symbolic link")));
  char buf[4];
  Status read = b.ReadRanges({{"a/leaf", 0, 4, buf}});
  EXPECT_THAT(
      read,
      StatusIs(StatusCode::kDataLoss,
               "cannot read object a/leaf: a/leaf is a symbolic link (a store "
               "never follows links)"));

  // Writes: through a linked directory, and onto a link.
  Status put = b.Put("d/new", "x");
  EXPECT_THAT(
      put,
      StatusIs(
          StatusCode::kDataLoss,
          "cannot write d/new: d is a symbolic link (a store never follows "
          "links)"));
  put =
      b.PutObject("d/sub/new", {ConstBuffer{"x", 1}}, Durability::kAtNextSync);
  EXPECT_EQ(put.code(), StatusCode::kDataLoss);
  put = b.Put("a/leaf", "x");
  EXPECT_THAT(
      put,
      StatusIs(StatusCode::kDataLoss,
               "cannot write a/leaf: a/leaf is a symbolic link (a store never "
               "follows links)"));

  // List reports links as keys and never descends into them.
  EXPECT_EQ(Must(b.List("")),
            (std::vector<std::string>{"a/leaf", "a/real", "d"}));
  auto under = b.List("d/");
  EXPECT_THAT(under, StatusIs(StatusCode::kDataLoss,
                              HasSubstr("d is a symbolic link")));

  // Deleting through a link fails; deleting a link removes the link only.
  Status del = b.Delete("d/file");
  EXPECT_THAT(
      del, StatusIs(StatusCode::kDataLoss,
                    "cannot delete d/file: d is a symbolic link (a store never "
                    "follows links)"));
  EXPECT_EQ(Must(b.RemoveStaleTemporaries(std::chrono::seconds(0))), 0u);
  EXPECT_EQ(Snapshot(f.sentinel()), before);
  MustOk(b.Delete("a/leaf"));
  MustOk(b.Delete("d"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(f.PathOf("a/leaf"))));
  EXPECT_FALSE(fs::exists(fs::symlink_status(f.PathOf("d"))));
  EXPECT_EQ(Must(b.List("")), std::vector<std::string>{"a/real"});
  EXPECT_EQ(Snapshot(f.sentinel()), before);
}

// A dangling link and a link to the store's own files are refused too; the
// root may itself be a link (the user's choice, resolved once at open).
TEST(FsConfinementTest, DanglingLinksAndALinkedRoot) {
  Fixture f;
  MustOk(f.backend().Put("own/record", "own"));
  f.LinkAt("own/alias", f.PathOf("own/record"));
  f.LinkAt("own/dangling", f.store_dir() + "/nowhere");
  EXPECT_EQ(f.backend().Get("own/alias").status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(f.backend().Get("own/dangling").status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(f.backend().Put("own/dangling", "x").code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(f.store_dir() + "/nowhere"));

  const std::string root_link = f.sentinel() + "/../root-link";
  fs::create_symlink(f.store_dir(), root_link);
  auto via_link = Must(OpenObjectStore("fs://" + root_link));
  EXPECT_EQ(Must(via_link->Get("own/record")), "own");
  MustOk(via_link->Put("own/second", "2"));
  EXPECT_EQ(ReadFile(f.PathOf("own/second")), "2");
}

// A FIFO planted at a key is no object, and opening it never blocks.
TEST(FsConfinementTest, FifoAtAKeyIsNotFound) {
  Fixture f;
  MustOk(f.backend().Put("p/x", "x"));
  ASSERT_EQ(::mkfifo(f.PathOf("p/fifo").c_str(), 0644), 0);
  EXPECT_EQ(f.backend().Get("p/fifo").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.backend().ObjectSize("p/fifo").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Must(f.backend().List("p/")), std::vector<std::string>{"p/x"});
}

// ---------------------------------------------------------------- weights

struct Side {
  WeightPlacementManifest placement;
  HostBuffers buffers;
};

WeightPlacementManifest Layout(int64_t tp, const std::string& revision) {
  auto d = testing::GridDraft({.tp = tp});
  d.header.revision = revision;
  testing::AddTensor(&d, {.tensor_id = "w", .shape = {16, 8}, .tp_dim = 0});
  testing::AddTensor(&d, {.tensor_id = "norm", .shape = {8}});
  return Must(d.Build());
}

Side Source(const std::string& revision) {
  Side s{Layout(2, revision), {}};
  s.buffers = Must(AllocateHostBuffers(s.placement, "source"));
  internal::FillPattern(s.placement, internal::TensorIndex(s.placement),
                        s.buffers);
  return s;
}

UploadPlan Upload(WeightStore& store, const Side& src,
                  std::vector<UploadReceipt>* receipts) {
  auto plan = Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  for (const auto& b : src.buffers.bindings) {
    auto r = Must(store.Upload(plan, src.placement, b));
    receipts->insert(receipts->end(), r.begin(), r.end());
  }
  return plan;
}

UploadPlan Publish(WeightStore& store, const Side& src) {
  std::vector<UploadReceipt> receipts;
  UploadPlan plan = Upload(store, src, &receipts);
  MustOk(store.Commit(plan, receipts));
  return plan;
}

std::string Base(const UploadPlan& plan) { return plan.manifest().group_id(); }

std::string PayloadDir(const UploadPlan& plan) {
  return Base(plan) + "/payload/" + plan.transaction_id();
}

// Moves the directory at `key` into the sentinel (as `name`) and leaves a
// link to it in its place: the store's bytes now live outside the store.
void MoveOutAndLink(const Fixture& f, const std::string& key,
                    const std::string& name) {
  const std::string outside = f.sentinel() + "/" + name;
  fs::rename(f.PathOf(key), outside);
  fs::create_symlink(outside, f.PathOf(key));
}

// Regression: gc of an abandoned upload whose payload/<txn> is a link
// removed the files of the linked directory.
TEST(StoreConfinementTest, GcLeavesALinkedPayloadDirectoryAlone) {
  Fixture f;
  WeightStore store = f.Open();
  const Side src = Source("r1");
  std::vector<UploadReceipt> receipts;
  const UploadPlan abandoned = Upload(store, src, &receipts);
  MoveOutAndLink(f, PayloadDir(abandoned), "moved-payload");
  const auto before = Snapshot(f.sentinel());
  WeightStore gc = f.Open({.gc_grace = std::chrono::seconds(0)});
  const GcReport report = Must(gc.Gc());
  EXPECT_EQ(report.transactions_removed,
            std::vector<std::string>{Base(abandoned) + "/" +
                                     abandoned.transaction_id()});
  EXPECT_TRUE(report.skipped.empty());
  EXPECT_EQ(Snapshot(f.sentinel()), before);
  // The link itself is gone from the store, with the rest of the upload.
  EXPECT_EQ(f.Keys("weights/"), std::vector<std::string>{});
}

// Regression: rm of a revision whose payload/<txn> was replaced by a link
// removed every file in the linked directory.
TEST(StoreConfinementTest, RemoveLeavesALinkedPayloadDirectoryAlone) {
  Fixture f;
  WeightStore store = f.Open();
  const UploadPlan plan = Publish(store, Source("r1"));
  MoveOutAndLink(f, PayloadDir(plan), "moved-payload");
  const auto before = Snapshot(f.sentinel());
  ASSERT_FALSE(Must(f.backend().List("")).empty());
  MustOk(store.Remove(plan.manifest().manifest_key()));
  EXPECT_EQ(Snapshot(f.sentinel()), before);
  EXPECT_EQ(f.Keys(""), std::vector<std::string>{});
  EXPECT_EQ(Must(store.List()).size(), 0u);
}

// Regression: verify followed the link and called a revision whose payload
// lives outside the store healthy.
TEST(StoreConfinementTest, VerifyRefusesAPayloadBehindALink) {
  Fixture f;
  WeightStore store = f.Open();
  const UploadPlan plan = Publish(store, Source("r1"));
  const std::string key = plan.manifest().manifest_key();
  MustOk(store.Verify(key).status());
  MoveOutAndLink(f, PayloadDir(plan), "moved-payload");
  auto verified = store.Verify(key);
  EXPECT_THAT(
      verified,
      StatusIs(StatusCode::kDataLoss,
               HasSubstr(": " + PayloadDir(plan) +
                         " is a symbolic link (a store never follows links)")));
  // The checksum records behind a link are refused the same way.
  fs::remove(f.PathOf(PayloadDir(plan)));
  fs::rename(f.sentinel() + "/moved-payload", f.PathOf(PayloadDir(plan)));
  MustOk(store.Verify(key).status());
  MoveOutAndLink(f, Base(plan) + "/checksums", "moved-checksums");
  verified = store.Verify(key);
  EXPECT_THAT(verified, StatusIs(StatusCode::kDataLoss,
                                 HasSubstr(Base(plan) +
                                           "/checksums is a symbolic link")));
}

// Regression: one tampered revision made List, gc and rm fail for the whole
// store, and rm of a manifest naming another revision's group removed that
// other revision.
TEST(StoreConfinementTest, CorruptRevisionsAreReportedAndRemovable) {
  Fixture f;
  WeightStore store = f.Open();
  const UploadPlan good = Publish(store, Source("good"));
  const UploadPlan garbage = Publish(store, Source("garbage"));
  const UploadPlan passwd = Publish(store, Source("passwd"));
  const UploadPlan group = Publish(store, Source("group"));
  const UploadPlan linked = Publish(store, Source("linked"));
  // An abandoned upload of the good revision (collectable) and one of the
  // garbage revision (left alone: its manifest cannot say what it uses).
  std::vector<UploadReceipt> r1, r2;
  const UploadPlan abandoned = Upload(store, Source("good"), &r1);
  const UploadPlan abandoned_corrupt = Upload(store, Source("garbage"), &r2);

  const std::string garbage_key = garbage.manifest().manifest_key();
  WriteFile(f.PathOf(garbage_key), "{\"not\": \"a manifest\"");
  // A manifest whose payload is /etc/passwd.
  const std::string passwd_key = passwd.manifest().manifest_key();
  std::string text = ReadFile(f.PathOf(passwd_key));
  const std::string object = PayloadDir(passwd) + "/";
  for (size_t at; (at = text.find(object)) != std::string::npos;) {
    text.replace(at, object.size() + 24, "/etc/passwd");
  }
  WriteFile(f.PathOf(passwd_key), text);
  // A manifest that names the good revision as its group (rm used to
  // remove everything under that group).
  const std::string group_key = group.manifest().manifest_key();
  text = ReadFile(f.PathOf(group_key));
  const std::string own_group = "\"group_id\":\"" + Base(group) + "\"";
  ASSERT_NE(text.find(own_group), std::string::npos) << text;
  text.replace(text.find(own_group), own_group.size(),
               "\"group_id\":\"" + Base(good) + "\"");
  WriteFile(f.PathOf(group_key), text);
  // A manifest that is a link to a copy of a valid one outside the store.
  const std::string linked_key = linked.manifest().manifest_key();
  fs::copy_file(f.PathOf(linked_key), f.sentinel() + "/linked-manifest");
  f.LinkAt(linked_key, f.sentinel() + "/linked-manifest");
  const auto sentinel_before = Snapshot(f.sentinel());

  const auto revisions = Must(store.List());
  std::map<std::string, RevisionInfo> by_key;
  for (const auto& r : revisions) by_key[r.manifest_key] = r;
  ASSERT_EQ(by_key.size(), 5u);
  EXPECT_EQ(by_key[good.manifest().manifest_key()].state, "READY");
  EXPECT_EQ(by_key[good.manifest().manifest_key()].error, "");
  for (const std::string& k :
       {garbage_key, passwd_key, group_key, linked_key}) {
    EXPECT_EQ(by_key[k].state, "CORRUPT") << k;
    EXPECT_EQ(by_key[k].fragments, 0u) << k;
  }
  EXPECT_THAT(by_key[garbage_key].error,
              HasSubstr("corrupt manifest " + garbage_key + ": "));
  EXPECT_THAT(by_key[passwd_key].error,
              HasSubstr("payload object_key does not belong to manifest "
                        "group: /etc/passwd"));
  EXPECT_EQ(by_key[group_key].error,
            "corrupt manifest " + group_key +
                ": manifest_key must be <group_id>/manifest: " + group_key +
                " (group_id " + Base(good) + ")");
  EXPECT_EQ(by_key[linked_key].error,
            "cannot read record " + linked_key + ": " + linked_key +
                " is a symbolic link (a store never follows links)");

  // Verify: the good one passes, each corrupt one fails with its error.
  MustOk(store.Verify(good.manifest().manifest_key()).status());
  for (const std::string& k :
       {garbage_key, passwd_key, group_key, linked_key}) {
    auto v = store.Verify(k);
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss) << k;
    EXPECT_EQ(v.status().message(), by_key[k].error);
  }

  // Gc: collects the good revision's abandoned upload, leaves every
  // corrupt revision alone and says so.
  WeightStore gc = f.Open({.gc_grace = std::chrono::seconds(0)});
  const auto garbage_keys = f.Keys(Base(garbage) + "/");
  const GcReport report = Must(gc.Gc());
  EXPECT_EQ(report.transactions_removed,
            std::vector<std::string>{Base(abandoned) + "/" +
                                     abandoned.transaction_id()});
  std::set<std::string> skipped;
  for (const auto& p : report.skipped) skipped.insert(p.key);
  EXPECT_EQ(skipped, (std::set<std::string>{garbage_key, passwd_key, group_key,
                                            linked_key}));
  EXPECT_EQ(f.Keys(Base(garbage) + "/"), garbage_keys);
  EXPECT_FALSE(
      f.Keys(Base(garbage) + "/payload/" + abandoned_corrupt.transaction_id())
          .empty());

  // rm of each corrupt revision removes exactly the keys under it.
  const auto good_keys = f.Keys(Base(good) + "/");
  for (const UploadPlan* p : {&garbage, &passwd, &group, &linked}) {
    MustOk(store.Remove(p->manifest().manifest_key()));
    EXPECT_EQ(f.Keys(Base(*p) + "/"), std::vector<std::string>{});
  }
  EXPECT_EQ(f.Keys(Base(good) + "/"), good_keys);
  MustOk(store.Verify(good.manifest().manifest_key()).status());
  EXPECT_EQ(Must(store.List()).size(), 1u);
  EXPECT_EQ(Snapshot(f.sentinel()), sentinel_before);
  // rm refuses what is no manifest key of a revision.
  Status st = store.Remove("weights/manifest");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Keys(Base(good) + "/"), good_keys);
}

// Gc never publishes a pending manifest that names another revision.
TEST(StoreConfinementTest, GcDoesNotRollForwardATamperedPendingManifest) {
  Fixture f;
  WeightStore store = f.Open();
  const UploadPlan other = Publish(store, Source("other"));
  std::vector<UploadReceipt> receipts;
  const UploadPlan plan = Upload(store, Source("mine"), &receipts);
  MustOk(store.Commit(plan, receipts));
  // Pretend the writer died after its decision: unpublish, and tamper with
  // the pending manifest so that it names the other revision.
  const std::string key = plan.manifest().manifest_key();
  fs::remove(f.PathOf(key));
  const std::string pending = Base(plan) + "/transactions/" +
                              plan.transaction_id() + "/pending-manifest";
  WriteFile(f.PathOf(pending),
            ReadFile(f.PathOf(other.manifest().manifest_key())));
  WeightStore gc = f.Open({.gc_grace = std::chrono::seconds(0)});
  const GcReport report = Must(gc.Gc());
  EXPECT_TRUE(report.transactions_completed.empty());
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].key, Base(plan) + "/" + plan.transaction_id());
  EXPECT_EQ(report.skipped[0].error,
            "damaged pending weight manifest: " + pending);
  EXPECT_EQ(f.backend().Get(key).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(f.Keys(PayloadDir(plan)).empty());
}

// The "must show" test: links to the sentinel planted at every directory
// level of the key scheme and where records and objects should be, then
// every store operation; the sentinel is exactly as it was.
TEST(StoreConfinementTest, LinksAtEveryLevelNeverReachTheSentinel) {
  Fixture f;
  WeightStore store = f.Open();
  const std::string s = f.sentinel();
  const UploadPlan kept = Publish(store, Source("kept"));
  const UploadPlan removed = Publish(store, Source("removed"));
  std::vector<UploadReceipt> r1, r2, r3;
  const UploadPlan abandoned = Upload(store, Source("abandoned"), &r1);
  const UploadPlan to_abort = Upload(store, Source("aborted"), &r2);
  const std::string base = Base(kept);  // weights/default/<res>/kept/<gen>
  const std::string revision_dir = fs::path(base).parent_path().string();
  const std::string resource_dir =
      fs::path(revision_dir).parent_path().string();
  const std::string namespace_dir =
      fs::path(resource_dir).parent_path().string();
  // Directory links at every level.
  for (const std::string& dir :
       {std::string(""), std::string("weights"), namespace_dir, resource_dir,
        revision_dir, base, base + "/payload", base + "/checksums",
        base + "/transactions", PayloadDir(kept),
        base + "/transactions/" + kept.transaction_id(),
        Base(abandoned) + "/payload"}) {
    f.LinkAt((dir.empty() ? "" : dir + "/") + "zz-link", s);
  }
  // Whole directories of the layout replaced by links.
  MoveOutAndLink(f, PayloadDir(abandoned), "abandoned-payload");
  MoveOutAndLink(f, Base(abandoned) + "/checksums", "abandoned-checksums");
  MoveOutAndLink(f, PayloadDir(removed), "removed-payload");
  f.LinkAt(Base(to_abort) + "/checksums/" + to_abort.transaction_id(), s);
  f.LinkAt(Base(removed) + "/leases", s + "/sub");
  // Links where records and objects should be.
  f.LinkAt(
      Base(removed) + "/transactions/" + removed.transaction_id() + "/started",
      s + "/started");
  f.LinkAt(Base(to_abort) + "/transactions/" + to_abort.transaction_id() +
               "/decision",
           s + "/file");
  f.LinkAt(namespace_dir + "/linked-res/rev/0/manifest", s + "/manifest");
  fs::create_directories(f.PathOf(namespace_dir + "/linked-gen/rev"));
  fs::create_symlink(s + "/sub", f.PathOf(namespace_dir + "/linked-gen/rev/0"));
  // An upload whose directories are links by the time it writes.
  const Side late = Source("late");
  auto late_plan =
      Must(store.PrepareUpload(late.placement, late.buffers.bindings));
  f.LinkAt(Base(late_plan) + "/payload", s);
  f.LinkAt(Base(late_plan) + "/checksums", s + "/sub");
  const auto before = Snapshot(s);

  // Library: upload, commit, abort, load, list, verify, remove, gc.
  for (const auto& b : late.buffers.bindings) {
    auto r = store.Upload(late_plan, late.placement, b);
    EXPECT_THAT(
        r, StatusIs(StatusCode::kDataLoss, HasSubstr("is a symbolic link")));
  }
  EXPECT_FALSE(store.Commit(late_plan, {}).ok());
  EXPECT_FALSE(store.Commit(abandoned, r1).ok());
  EXPECT_FALSE(store.Abort(to_abort).ok());
  const Side fresh = Source("fresh");
  const UploadPlan fresh_plan = Publish(store, fresh);
  {
    auto target = Layout(4, "kept");
    HostBuffers buffers = Must(AllocateHostBuffers(target, "target"));
    auto loaded =
        store.Load(Must(store.ReadManifest(kept.manifest().manifest_key())),
                   target, buffers.bindings);
    EXPECT_OK(loaded);
    EXPECT_EQ(
        internal::VerifyPattern(target, internal::TensorIndex(target), buffers),
        "");
    auto removed_manifest =
        Must(store.ReadManifest(removed.manifest().manifest_key()));
    auto removed_target = Layout(4, "removed");
    HostBuffers removed_buffers =
        Must(AllocateHostBuffers(removed_target, "target"));
    auto refused =
        store.Load(removed_manifest, removed_target, removed_buffers.bindings);
    EXPECT_FALSE(refused.ok());
    EXPECT_THAT(refused.status().message(), HasSubstr("is a symbolic link"));
  }
  const auto revisions = Must(store.List());
  std::map<std::string, std::string> states;
  for (const auto& r : revisions) states[r.manifest_key] = r.state;
  EXPECT_EQ(states[kept.manifest().manifest_key()], "READY");
  EXPECT_EQ(states[namespace_dir + "/linked-res/rev/0/manifest"], "CORRUPT");
  for (const auto& r : revisions) {
    if (r.state == "IMPORTING") continue;
    auto v = store.Verify(r.manifest_key);
    EXPECT_EQ(v.ok(),
              r.manifest_key == kept.manifest().manifest_key() ||
                  r.manifest_key == fresh_plan.manifest().manifest_key())
        << r.manifest_key << ": " << v.status().ToString();
  }
  MustOk(store.Remove(removed.manifest().manifest_key()));
  MustOk(store.Remove(namespace_dir + "/linked-res/rev/0/manifest"));
  WeightStore gc = f.Open({.gc_grace = std::chrono::seconds(0)});
  auto report = gc.Gc();
  EXPECT_OK(report);
  report = gc.Gc();
  EXPECT_OK(report);
  MustOk(store.Verify(kept.manifest().manifest_key()).status());
  MustOk(store.Remove(fresh_plan.manifest().manifest_key()));
  MustOk(f.backend().RemoveStaleTemporaries(std::chrono::seconds(0)).status());

  EXPECT_EQ(Snapshot(s), before);
}

}  // namespace
}  // namespace reshard
