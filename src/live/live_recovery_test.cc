// Standing sessions that survive failure: every region verified on
// arrival, a byte flipped in flight failing the update on every rank while
// shadow targets keep serving the last good generation, updates that fail
// before any byte moved or after every byte arrived retried on the same
// session and connections, version tags that must agree, and the version
// every rank reads after each successful update.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "live/live_records.h"
#include "live/live_verify.h"
#include "reshard/backends/fs_store.h"
#include "reshard/backends/ucx_options.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/children.h"
#include "testing/live_seats.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using namespace std::chrono_literals;

using ::reshard::testing::InChildren;
using ::reshard::testing::Must;
using ::testing::HasSubstr;

struct Wire {
  std::string name;
  std::string exchange;
  UcxOptions ucx;
  LiveProtocol protocol;
};

// UCX over shared memory and TCP on loopback, pushed and pulled, and the
// in-process exchange.
std::vector<Wire> Wires() {
  const UcxOptions tcp{.tls = "tcp", .net_devices = "lo"};
  return {{"shm pull", "ucx", {}, LiveProtocol::kPull},
          {"shm push", "ucx", {}, LiveProtocol::kPush},
          {"tcp push", "ucx", tcp, LiveProtocol::kPush},
          {"tcp pull", "ucx", tcp, LiveProtocol::kPull},
          {"inproc push", "inproc", {}, LiveProtocol::kPush},
          {"inproc pull", "inproc", {}, LiveProtocol::kPull}};
}

// body(0) and body(1) at once: threads of this process for the in-process
// exchange, else child processes (a rank that initialised UCX must not
// fork later tests' ranks).
std::vector<std::string> TwoRanks(
    const Wire& w, const std::function<std::string(uint32_t)>& body) {
  if (w.exchange != "inproc") return InChildren(2, body);
  std::vector<std::string> out(2);
  std::thread other([&] { out[1] = body(1); });
  out[0] = body(0);
  other.join();
  return out;
}

LiveSessionOptions Options(const Wire& w, const std::string& session,
                           uint32_t rank) {
  LiveSessionOptions lo;
  lo.session = session;
  lo.rank = rank;
  lo.ranks = 2;
  lo.timeout = std::chrono::seconds(10);
  lo.exchange = w.exchange;
  if (w.exchange == "ucx") lo.exchange_options = ToPeerExchangeOptions(w.ucx);
  lo.protocol = w.protocol;
  return lo;
}

using ::reshard::testing::Seat;
using ::reshard::testing::SeatOf;

std::string VersionText(const std::optional<LiveVersion>& v) {
  if (!v) return "none";
  return std::to_string(v->generation) + " " + v->tag + " " +
         live_internal::HashHex(v->digest);
}

// A byte of update 2 flipped after the source hashed it: update 2 fails
// on both ranks naming the region; the serving (shadow) targets still hold
// update 1; updates 3 and 4 verify every region on the same session and
// connections; the version names update 4 on both ranks, and the target's
// version record and callback agree.
TEST(LiveRecoveryTest, FlippedByteFailsEveryRankAndTheSessionGoesOn) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  std::vector<Wire> wires = Wires();
  wires.push_back({"shm push, delta", "ucx", {}, LiveProtocol::kPush});
  for (const Wire& w : wires) {
    SCOPED_TRACE(w.name);
    const bool delta = w.name.ends_with("delta");
    testing::TempDir dir;
    const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat = SeatOf(source, target, rank, "flip-" + std::to_string(rank));
      LiveSessionOptions lo = Options(w, "flip", rank);
      lo.shadow_targets = true;
      lo.delta = delta;
      if (rank == 1) lo.corrupt_received_in_update = 2;
      std::string seen;
      lo.on_version = [&](const LiveVersion& v) { seen = VersionText(v); };
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      std::string out;
      for (uint64_t g = 1; g <= 4; ++g) {
        internal::FillPattern(source, tensors, seat.buffers, nullptr, g);
        const std::string tag = rank == 0 ? "step-" + std::to_string(g) : "";
        auto u = (*session)->Update(g, nullptr, tag);
        if (!u.ok()) {
          const std::string m = u.status().ToString();
          out += m.find("region 0 (tensor ") != std::string::npos &&
                         m.find(
                             "the bytes received differ from what the "
                             "source sent") != std::string::npos &&
                         m.find("the session stays open") != std::string::npos
                     ? "failed naming region 0|"
                     : "failed: " + m + "|";
          if (rank == 1) {
            out += internal::VerifyPattern(target, tensors, seat.buffers,
                                           nullptr, g - 1)
                           .empty()
                       ? "serving holds " + std::to_string(g - 1) + "|"
                       : "serving changed|";
          }
          continue;
        }
        out += "ok " + std::to_string(u->verified_regions) + "|";
        if (rank == 1 &&
            !internal::VerifyPattern(target, tensors, seat.buffers, nullptr, g)
                 .empty()) {
          out += "wrong bytes|";
        }
      }
      out += VersionText((*session)->version()) + "|" +
             std::to_string((*session)->connections()) + " connection(s)|" +
             ((*session)->usable() ? "usable" : "over");
      if (rank == 1) {
        const auto record = Must(store->Get("flip/version/1"));
        const auto decoded =
            Must(internal::DecodeVersionRecord(record, "flip/version/1", 1));
        out += decoded.version == *(*session)->version() ? "|record agrees"
                                                         : "|record differs";
        out += seen == VersionText((*session)->version()) ? "|callback agrees"
                                                          : "|callback differs";
      }
      if (Status closed = (*session)->Close(); !closed.ok()) {
        out += "|close: " + closed.ToString();
      }
      return out;
    });
    const std::string n = std::to_string(plan.regions().size());
    const std::string tail = "|4 step-4 ";
    ASSERT_EQ(out[0].substr(0, out[0].find(tail)),
              "ok 0|failed naming region 0|ok 0|ok 0");
    ASSERT_EQ(out[1].substr(0, out[1].find(tail)),
              "ok " + n + "|failed naming region 0|serving holds 1|ok " + n +
                  "|ok " + n);
    // The same version (and digest) on both ranks; one connection each.
    const std::string version0 = out[0].substr(out[0].find(tail));
    EXPECT_EQ(out[1].substr(out[1].find(tail)),
              version0.substr(0, version0.find("|usable")) +
                  "|usable|record agrees|callback agrees");
    EXPECT_THAT(version0, HasSubstr("|1 connection(s)|usable"));
  }
}

// A rank whose validator refuses update 2 fails it on both ranks; update
// 2 again (a retry at the same generation) succeeds on the same session,
// and the failed attempt's records are gone after it.
TEST(LiveRecoveryTest, AFailedUpdateIsRetriedAtItsGeneration) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  const Wire w = Wires()[4];  // inproc push
  testing::TempDir dir;
  const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "retry-" + std::to_string(rank));
    LiveSessionOptions lo = Options(w, "retry", rank);
    int refusals = rank == 1 ? 1 : 0;
    lo.validate_targets = [&]() -> Status {
      if (refusals-- > 0) return Status::DataLoss("refused once");
      return Status::OK();
    };
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    std::string out;
    for (uint64_t g : {1, 1, 2}) {
      internal::FillPattern(source, tensors, seat.buffers, nullptr, g);
      auto u = (*session)->Update(g);
      out += u.ok() ? "ok|" : "failed|";
      if (!u.ok() &&
          u.status().message().find("refused once") == std::string::npos) {
        out += u.status().ToString() + "|";
      }
    }
    if (rank == 1) {
      out += internal::VerifyPattern(target, tensors, seat.buffers, nullptr, 2);
    }
    if (Status closed = (*session)->Close(); !closed.ok()) {
      out += closed.ToString() + "|";
    }
    return out;
  });
  EXPECT_EQ(out[0], "failed|ok|ok|");
  EXPECT_EQ(out[1], "failed|ok|ok|");
  // Every update's records, the failed attempt's included, are gone once
  // both ranks closed.
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  EXPECT_THAT(Must(store->List("retry/")), ::testing::IsEmpty());
}

// Ranks that pass different tags fail the update before any byte moves,
// naming both; a tag with a control character is refused before anything
// is recorded; the session goes on either way.
TEST(LiveRecoveryTest, VersionTagsMustAgreeAndBePrintable) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const Wire w = Wires()[4];
  testing::TempDir dir;
  const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "tags-" + std::to_string(rank));
    auto session = LiveSession::Open(*store, source, target, seat.bindings,
                                     Options(w, "tags", rank));
    if (!session.ok()) return "open: " + session.status().ToString();
    std::string out;
    auto bad = (*session)->Update(1, nullptr, std::string("a\nb"));
    out += bad.status().ToString() + "|";
    auto split = (*session)->Update(1, nullptr, rank == 0 ? "a" : "b");
    out += split.ok() ? "ok|" : "failed|";
    if (rank == 0 && !split.ok()) out += split.status().ToString() + "|";
    auto same = (*session)->Update(2, nullptr, "a");
    out += same.ok() ? "ok " + VersionText((*session)->version()).substr(0, 3)
                     : same.status().ToString();
    (void)(*session)->Close();
    return out;
  });
  EXPECT_THAT(out[0], HasSubstr("InvalidArgument: live session tags: version "
                                "tag holds control character 10 at byte 1|"));
  EXPECT_THAT(out[0], HasSubstr("the ranks' version tags for the update "
                                "differ: rank 0 \"a\", rank 1 \"b\""));
  EXPECT_THAT(out[0], ::testing::EndsWith("the next one)|ok 2 a"));
  EXPECT_THAT(out[1], ::testing::EndsWith("failed|ok 2 a"));
}

// Without verification no region is checked and the version's digest is 0.
TEST(LiveRecoveryTest, VerificationCanBeTurnedOff) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const Wire w = Wires()[4];
  testing::TempDir dir;
  const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "off-" + std::to_string(rank));
    LiveSessionOptions lo = Options(w, "off", rank);
    lo.verify = false;
    lo.corrupt_received_in_update = rank == 1 ? 1 : 0;
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    auto u = (*session)->Update(1);
    std::string out = u.ok() ? std::to_string(u->verified_regions) + " " +
                                   VersionText((*session)->version())
                             : u.status().ToString();
    (void)(*session)->Close();
    return out;
  });
  EXPECT_EQ(out[0], "0 1  0000000000000000");
  EXPECT_EQ(out[1], "0 1  0000000000000000");
}

// Forks a process running body(rank, false) for each of two ranks; when
// rank `restarted`'s process has died, forks body(restarted, true) in its
// place. Returns what the survivor, the first process of `restarted` and
// its replacement wrote, in that order.
std::vector<std::string> TwoRanksOneRestarted(
    uint32_t restarted,
    const std::function<std::string(uint32_t rank, bool rejoin)>& body) {
  struct Child {
    pid_t pid;
    int read;
  };
  auto fork_one = [&](uint32_t rank, bool rejoin) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const std::string out = body(rank, rejoin);
      (void)!::write(fds[1], out.data(), out.size());
      std::_Exit(0);
    }
    ::close(fds[1]);
    return Child{pid, fds[0]};
  };
  auto collect = [](Child c) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(c.read, buf, sizeof buf)) > 0) out.append(buf, n);
    ::close(c.read);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    return out;
  };
  Child survivor = fork_one(1 - restarted, false);
  Child first = fork_one(restarted, false);
  std::string first_out = collect(first);  // it dies after update 2
  Child second = fork_one(restarted, true);
  std::string second_out = collect(second);
  return {collect(survivor), first_out, second_out};
}

// A rank killed between updates 2 and 3 and started again with rejoin (a
// source, then a target; pushed and pulled over shared memory, pushed over
// TCP, and with delta updates): the survivor's update 3 waits for it and
// succeeds without reopening, having connected again only to the restarted
// rank; every update verifies every region, the restarted rank's first
// update is a full one and deltas resume after it.
TEST(LiveRecoveryTest, ARestartedRankRejoinsWithoutAReopen) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const std::string n = std::to_string(plan.regions().size());
  std::vector<Wire> wires = {Wires()[0], Wires()[1], Wires()[2]};
  wires.push_back({"shm push, delta", "ucx", {}, LiveProtocol::kPush});
  // Restarted after its heartbeat fell silent: the survivor saw it leave.
  wires.push_back({"shm push, late", "ucx", {}, LiveProtocol::kPush});
  for (const Wire& w : wires) {
    const bool delta = w.name.ends_with("delta");
    const bool late = w.name.ends_with("late");
    const double fraction = delta ? 0.01 : 1.0;
    for (uint32_t restarted : {0u, 1u}) {
      SCOPED_TRACE(w.name + ", rank " + std::to_string(restarted));
      testing::TempDir dir;
      const auto out = TwoRanksOneRestarted(
          restarted, [&](uint32_t rank, bool rejoin) -> std::string {
            if (rejoin && late) std::this_thread::sleep_for(2500ms);
            auto store = Must(OpenDirectoryRecordStore(dir.path()));
            Seat seat = SeatOf(
                source, target, rank,
                "again-" + std::to_string(rank) + (rejoin ? "-rejoined" : ""));
            LiveSessionOptions lo = Options(w, "again", rank);
            lo.rejoin = rejoin;
            lo.delta = delta;
            auto session =
                LiveSession::Open(*store, source, target, seat.bindings, lo);
            if (!session.ok()) return "open: " + session.status().ToString();
            std::string out;
            for (uint64_t g = rejoin ? 3 : 1; g <= 4; ++g) {
              internal::FillPattern(source, tensors, seat.buffers, nullptr, g,
                                    fraction);
              auto u = (*session)->Update(g);
              if (!u.ok()) return out + u.status().ToString();
              out += "ok " + std::to_string(u->verified_regions);
              if (delta && rank == 1) {
                out += u->delta_regions > 0 ? " delta" : " full";
              }
              out += "|";
              if (rank == 1 &&
                  !internal::VerifyPattern(target, tensors, seat.buffers,
                                           nullptr, g, fraction)
                       .empty()) {
                out += "wrong bytes|";
              }
              if (g == 2 && rank == restarted && !rejoin) ::raise(SIGKILL);
            }
            out += std::to_string((*session)->connections()) +
                   " connection(s), " + std::to_string((*session)->rejoins()) +
                   " rejoin(s)";
            if (Status closed = (*session)->Close(); !closed.ok()) {
              out += "|close: " + closed.ToString();
            }
            return out;
          });
      const std::string t = restarted == 1 ? n : "0";  // target's verified
      const std::string s = restarted == 1 ? "0" : n;  // survivor's
      const std::string kind1 = delta ? " full" : "";
      const std::string kind = delta ? " delta" : "";
      const bool survivor_targets = restarted == 0;
      EXPECT_EQ(out[0], "ok " + s + (survivor_targets ? kind1 : "") + "|ok " +
                            s + (survivor_targets ? kind : "") + "|ok " + s +
                            (survivor_targets ? kind1 : "") + "|ok " + s +
                            (survivor_targets ? kind : "") +
                            "|2 connection(s), 1 rejoin(s)");
      EXPECT_EQ(out[1], "");  // killed
      EXPECT_EQ(out[2], "ok " + t + (survivor_targets ? "" : kind1) + "|ok " +
                            t + (survivor_targets ? "" : kind) +
                            "|1 connection(s), 0 rejoin(s)");
    }
  }
}

// A RecordStore that writes garbage in place of one record: a peer
// process gone wrong.
class GarbageStore : public RecordStore {
 public:
  GarbageStore(RecordStore& base, std::string key)
      : base_(base), key_(std::move(key)) {}
  Status Put(std::string_view key, std::string_view value) override {
    return base_.Put(key, key == key_ ? "{\"rank\":1,\"tag\":7}" : value);
  }
  Result<std::string> Get(std::string_view key) override {
    return base_.Get(key);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    return base_.List(prefix);
  }
  Status Delete(std::string_view key) override { return base_.Delete(key); }

 private:
  RecordStore& base_;
  std::string key_;
};

// A malformed fenced record fails its update on every rank naming the
// record, before any byte moves; the next update runs on the same session.
TEST(LiveRecoveryTest, AGarbledFenceFailsTheUpdateNamingTheRecord) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  const Wire w = Wires()[4];
  testing::TempDir dir;
  const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
    auto base = Must(OpenDirectoryRecordStore(dir.path()));
    GarbageStore store(*base, "garbled/u/2/fenced/1");
    Seat seat = SeatOf(source, target, rank, "garbled-" + std::to_string(rank));
    auto session = LiveSession::Open(store, source, target, seat.bindings,
                                     Options(w, "garbled", rank));
    if (!session.ok()) return "open: " + session.status().ToString();
    std::string out;
    for (uint64_t g = 1; g <= 3; ++g) {
      internal::FillPattern(source, tensors, seat.buffers, nullptr, g);
      auto u = (*session)->Update(g);
      out += u.ok() ? "ok|" : u.status().ToString() + "|";
    }
    if (rank == 1) {
      out += internal::VerifyPattern(target, tensors, seat.buffers, nullptr, 3);
    }
    (void)(*session)->Close();
    return out;
  });
  for (uint32_t r = 0; r < 2; ++r) {
    SCOPED_TRACE(out[r]);
    EXPECT_TRUE(out[r].starts_with("ok|")) << out[r];
    EXPECT_THAT(out[r],
                HasSubstr("malformed fenced record garbled/u/2/fenced/1"));
    EXPECT_TRUE(out[r].ends_with("the next one)|ok|")) << out[r];
  }
}

// A rank that gives up (LiveSession::Abort) left for good: the other's
// next update fails at once naming it, without waiting for a rejoin, and
// the session is over there too.
TEST(LiveRecoveryTest, ARankThatAbortsEndsTheSessionAtOnce) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const Wire w = Wires()[4];
  testing::TempDir dir;
  const auto out = TwoRanks(w, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "quit-" + std::to_string(rank));
    LiveSessionOptions lo = Options(w, "quit", rank);
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    auto u1 = (*session)->Update(1);
    if (!u1.ok()) return u1.status().ToString();
    if (rank == 1) {
      (void)(*session)->Abort(Status::Aborted("the engine shuts down"));
      return std::string((*session)->usable() ? "usable" : "over");
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto u2 = (*session)->Update(2);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    return (u2.ok() ? std::string("ok") : u2.status().ToString()) +
           (waited < 2.0 ? "|at once|" : "|waited|") +
           ((*session)->usable() ? "usable" : "over");
  });
  EXPECT_EQ(out[1], "over");
  EXPECT_EQ(out[0],
            "Aborted: live session quit, rank 0, update 2: live session quit "
            "aborted by rank 1: Aborted: live session quit, rank 1, update 1: "
            "the engine shuts down|at once|over");
}

// Options and arguments refused before anything is published.
TEST(LiveRecoveryTest, NegativeRejoinTimeoutIsRefused) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  testing::TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  LiveSessionOptions lo = Options(Wires()[4], "negative", 0);
  lo.rejoin_timeout = -1ms;
  EXPECT_THAT(LiveSession::Open(*store, source, target, {}, lo),
              testing::StatusIs(StatusCode::kInvalidArgument,
                                "live session: rejoin_timeout (-1 ms) is "
                                "negative"));
  EXPECT_THAT(Must(store->List("negative/")), ::testing::IsEmpty());
}

// A rank killed between updates that never comes back: the survivor's
// next update fails once rejoin_timeout passed after its heartbeat fell
// silent, naming it, with nothing in flight, so the session stays usable
// (and closes).
TEST(LiveRecoveryTest, ARankThatDoesNotRejoinFailsTheUpdateAfterTheWait) {
  const auto source = testing::CubeLayout(2, 0, {8, 64, 1024});
  const auto target = testing::CubeLayout(2, 1, {8, 64, 1024});
  const auto tensors = internal::TensorIndex(source);
  const Wire w = Wires()[1];
  testing::TempDir dir;
  const auto out = InChildren(2, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "gone-" + std::to_string(rank));
    LiveSessionOptions lo = Options(w, "gone", rank);
    lo.rejoin_timeout = 1s;
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    internal::FillPattern(source, tensors, seat.buffers, nullptr, 1);
    auto u1 = (*session)->Update(1);
    if (!u1.ok()) return u1.status().ToString();
    if (rank == 1) ::raise(SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    auto u2 = (*session)->Update(2);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::string out = u2.ok() ? "ok" : u2.status().ToString();
    out += waited >= 2.0 && waited < 6.0 ? "|waited" : "|did not wait";
    out += (*session)->usable() ? "|usable" : "|over";
    return out;
  });
  EXPECT_THAT(out[0], HasSubstr("rank 1 left the session (no heartbeat for "));
  EXPECT_THAT(out[0],
              HasSubstr("ms; it died or hangs) and did not rejoin within "
                        "1000 ms (the session stays open"));
  EXPECT_THAT(out[0], ::testing::EndsWith("|waited|usable"));
  EXPECT_EQ(out[1], "");
}

}  // namespace
}  // namespace reshard
