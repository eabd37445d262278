#include "exec_nccl/nccl_host_api.h"

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace reshard::nccl {
namespace {

constexpr char kMagic[8] = {'r', 's', 'h', 'd', 'e', 'm', 'u', 'l'};

struct Member;

// One posted send or receive, waiting for its match.
struct Posted {
  uint8_t* buffer = nullptr;
  size_t bytes = 0;
  cuda::StreamHandle stream = 0;
  Member* owner = nullptr;
};

// The communicator a unique id names: its ranks as they join, and the
// posted work per (from, to).
struct World {
  int nranks = 0;  // 0 until the first rank joins
  std::vector<Member*> members;
  int joined = 0;
  std::string error;  // an asynchronous error, reported by every member
  std::map<std::pair<int, int>, std::deque<Posted>> sends, receives;
};

// One rank's communicator.
struct Member {
  std::shared_ptr<World> world;
  int rank = 0;
};

struct Fabric {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, std::shared_ptr<World>> worlds;  // by unique id
  CommHandle next_comm = 1;
  std::map<CommHandle, std::unique_ptr<Member>> comms;
  cuda::StreamHandle next_stream = 1;
  std::map<cuda::StreamHandle, uint64_t> streams;  // pending work each
};

Fabric& TheFabric() {
  static Fabric* fabric = new Fabric;
  return *fabric;
}

// A call queued in a group (per thread) until the outermost GroupEnd.
struct Queued {
  bool send = false;
  Posted posted;
  int peer = 0;
};
thread_local int group_depth = 0;
thread_local std::vector<Queued> group_queue;

std::string TypeName(NcclDataType type) {
  static const char* kNames[] = {"ncclInt8",   "ncclUint8", "ncclInt32",
                                 "ncclUint32", "ncclInt64", "ncclUint64"};
  const int i = static_cast<int>(type);
  return i >= 0 && i < 6 ? kNames[i] : "datatype " + std::to_string(i);
}

// Copies matched pairs of the channel from -> to while both sides have
// posted work (fabric lock held).
void Match(World& w, int from, int to, Fabric& f) {
  auto& sends = w.sends[{from, to}];
  auto& receives = w.receives[{from, to}];
  while (!sends.empty() && !receives.empty() && w.error.empty()) {
    const Posted s = sends.front();
    const Posted r = receives.front();
    if (s.bytes != r.bytes) {
      w.error = "ncclInvalidUsage: rank " + std::to_string(from) + " sent " +
                std::to_string(s.bytes) + " bytes to rank " +
                std::to_string(to) + ", which posted a receive of " +
                std::to_string(r.bytes) + " bytes";
      return;
    }
    if (s.bytes > 0) std::memmove(r.buffer, s.buffer, s.bytes);
    sends.pop_front();
    receives.pop_front();
    --f.streams[s.stream];
    --f.streams[r.stream];
  }
}

// Drops the member's posted work (its streams' work counts as done).
void DropWork(Member* m, Fabric& f) {
  for (auto* queues : {&m->world->sends, &m->world->receives}) {
    for (auto& [channel, q] : *queues) {
      std::erase_if(q, [&](const Posted& p) {
        if (p.owner != m) return false;
        --f.streams[p.stream];
        return true;
      });
    }
  }
}

Result<Member*> Find(Fabric& f, CommHandle comm, const char* call) {
  auto it = f.comms.find(comm);
  if (it == f.comms.end()) {
    return Status::InvalidArgument(std::string("ncclInvalidArgument: ") + call +
                                   ": comm " + std::to_string(comm) +
                                   " is not a communicator (destroyed, "
                                   "aborted or never made)");
  }
  return it->second.get();
}

}  // namespace

void HostNcclApi::Record(std::string call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(call));
}

std::vector<std::string> HostNcclApi::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

Result<NcclUniqueId> HostNcclApi::GetUniqueId() {
  Record("ncclGetUniqueId()");
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  const uint64_t n = f.next_id++;
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), kMagic, sizeof(kMagic));
  std::memcpy(id.bytes.data() + 8, &n, sizeof(n));
  f.worlds[n] = std::make_shared<World>();
  return id;
}

Result<CommHandle> HostNcclApi::CommInitRank(int nranks, const NcclUniqueId& id,
                                             int rank, int device) {
  Record("ncclCommInitRankConfig(nranks=" + std::to_string(nranks) +
         ", rank=" + std::to_string(rank) +
         ", device=" + std::to_string(device) + ", blocking=0)");
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Status::InvalidArgument(
        "ncclInvalidArgument: rank " + std::to_string(rank) +
        " is not in [0, nranks) for nranks " + std::to_string(nranks));
  }
  uint64_t n = 0;
  std::memcpy(&n, id.bytes.data() + 8, sizeof(n));
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  auto it = f.worlds.find(n);
  if (std::memcmp(id.bytes.data(), kMagic, sizeof(kMagic)) != 0 ||
      it == f.worlds.end()) {
    return Status::InvalidArgument(
        "ncclInvalidArgument: the unique id was not made by ncclGetUniqueId "
        "in this process");
  }
  World& w = *it->second;
  if (w.nranks == 0) {
    w.nranks = nranks;
    w.members.assign(nranks, nullptr);
  }
  if (w.nranks != nranks || w.members[rank] != nullptr ||
      w.joined == w.nranks) {
    return Status::InvalidArgument(
        "ncclInvalidUsage: the unique id's communicator of " +
        std::to_string(w.nranks) + " ranks cannot take rank " +
        std::to_string(rank) + " of " + std::to_string(nranks) +
        " (a unique id serves one communicator, each rank once)");
  }
  auto member = std::make_unique<Member>();
  member->world = it->second;
  member->rank = rank;
  w.members[rank] = member.get();
  ++w.joined;
  const CommHandle handle = f.next_comm++;
  f.comms[handle] = std::move(member);
  return handle;
}

Result<AsyncState> HostNcclApi::CommGetAsyncError(CommHandle comm) {
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  RESHARD_ASSIGN_OR_RETURN(Member * m, Find(f, comm, "ncclCommGetAsyncError"));
  if (!m->world->error.empty()) return Status::Internal(m->world->error);
  return m->world->joined < m->world->nranks ? AsyncState::kInProgress
                                             : AsyncState::kSuccess;
}

Status HostNcclApi::CommAbort(CommHandle comm) {
  Record("ncclCommAbort()");
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  RESHARD_ASSIGN_OR_RETURN(Member * m, Find(f, comm, "ncclCommAbort"));
  DropWork(m, f);
  m->world->members[m->rank] = nullptr;
  f.comms.erase(comm);
  return Status::OK();
}

Status HostNcclApi::CommDestroy(CommHandle comm) {
  Record("ncclCommDestroy()");
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  RESHARD_ASSIGN_OR_RETURN(Member * m, Find(f, comm, "ncclCommDestroy"));
  for (auto* queues : {&m->world->sends, &m->world->receives}) {
    for (const auto& [channel, q] : *queues) {
      for (const Posted& p : q) {
        if (p.owner == m) {
          return Status::InvalidArgument(
              "ncclInvalidUsage: ncclCommDestroy of a communicator with "
              "work in flight (ncclCommAbort drops it)");
        }
      }
    }
  }
  m->world->members[m->rank] = nullptr;
  f.comms.erase(comm);
  return Status::OK();
}

Status HostNcclApi::GroupStart() {
  Record("ncclGroupStart()");
  ++group_depth;
  return Status::OK();
}

Status HostNcclApi::GroupEnd() {
  Record("ncclGroupEnd()");
  if (group_depth == 0) {
    return Status::InvalidArgument(
        "ncclInvalidUsage: ncclGroupEnd without ncclGroupStart");
  }
  if (--group_depth > 0) return Status::OK();
  PostQueued();
  return Status::OK();
}

void HostNcclApi::PostQueued() {
  std::vector<Queued> queued = std::move(group_queue);
  group_queue.clear();
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  for (const Queued& q : queued) {
    World& w = *q.posted.owner->world;
    const int me = q.posted.owner->rank;
    const std::pair<int, int> channel =
        q.send ? std::pair{me, q.peer} : std::pair{q.peer, me};
    (q.send ? w.sends : w.receives)[channel].push_back(q.posted);
    Match(w, channel.first, channel.second, f);
  }
}

Status HostNcclApi::Send(const void* buffer, size_t count, NcclDataType type,
                         int peer, CommHandle comm, cuda::StreamHandle stream) {
  Record("ncclSend(count=" + std::to_string(count) + ", " + TypeName(type) +
         ", peer=" + std::to_string(peer) + ")");
  return Post(true, const_cast<void*>(buffer), count, type, peer, comm, stream);
}

Status HostNcclApi::Recv(void* buffer, size_t count, NcclDataType type,
                         int peer, CommHandle comm, cuda::StreamHandle stream) {
  Record("ncclRecv(count=" + std::to_string(count) + ", " + TypeName(type) +
         ", peer=" + std::to_string(peer) + ")");
  return Post(false, buffer, count, type, peer, comm, stream);
}

Status HostNcclApi::Post(bool send, void* buffer, size_t count,
                         NcclDataType type, int peer, CommHandle comm,
                         cuda::StreamHandle stream) {
  const char* call = send ? "ncclSend" : "ncclRecv";
  const std::string prefix = std::string("ncclInvalidArgument: ") + call;
  const size_t element = DataTypeBytes(type);
  if (element == 0) {
    return Status::InvalidArgument(prefix + ": invalid datatype " +
                                   std::to_string(static_cast<int>(type)));
  }
  if (buffer == nullptr && count > 0) {
    return Status::InvalidArgument(prefix + ": buffer is null");
  }
  Fabric& f = TheFabric();
  {
    std::lock_guard<std::mutex> lock(f.mu);
    RESHARD_ASSIGN_OR_RETURN(Member * m, Find(f, comm, call));
    const World& w = *m->world;
    if (w.joined < w.nranks) {
      return Status::InvalidArgument(std::string("ncclInvalidUsage: ") + call +
                                     " on a communicator still initialising");
    }
    if (peer < 0 || peer >= w.nranks) {
      return Status::InvalidArgument(prefix + ": peer " + std::to_string(peer) +
                                     " is not in [0, " +
                                     std::to_string(w.nranks) + ")");
    }
    if (!f.streams.count(stream)) {
      return Status::InvalidArgument(
          prefix + ": stream " + std::to_string(stream) + " is not a stream");
    }
    ++f.streams[stream];
    group_queue.push_back(
        {send,
         {static_cast<uint8_t*>(buffer), count * element, stream, m},
         peer});
  }
  if (group_depth == 0) PostQueued();  // outside a group: at once
  return Status::OK();
}

cuda::StreamHandle HostNcclApi::CreateStream() {
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  const cuda::StreamHandle s = f.next_stream++;
  f.streams[s] = 0;
  return s;
}

bool HostNcclApi::StreamIdle(cuda::StreamHandle stream) {
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  auto it = f.streams.find(stream);
  return it == f.streams.end() || it->second == 0;
}

void HostNcclApi::DestroyStream(cuda::StreamHandle stream) {
  Fabric& f = TheFabric();
  std::lock_guard<std::mutex> lock(f.mu);
  f.streams.erase(stream);
}

}  // namespace reshard::nccl
