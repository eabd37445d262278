// NcclExchange::Run (nccl_exchange.h describes the batches).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exec_nccl/nccl_exchange_impl.h"

namespace reshard::nccl {

using Clock = std::chrono::steady_clock;
using Kind = ExchangeOp::Kind;

namespace {

constexpr size_t kDiscarded = SIZE_MAX;

// A message the peer announced: the receive it fills, or kDiscarded (no
// receive takes it, or one of another size: it is received and dropped).
struct Incoming {
  size_t op = kDiscarded;
  uint64_t bytes = 0;
  uint8_t* into = nullptr;
  bool staged = false;  // `into` is a staging buffer to unpack from
};

}  // namespace

struct PairRun {
  enum Round { kInit, kCounts, kManifests, kMessages, kUnpacked, kDone };
  uint32_t peer = 0;
  Connection* conn = nullptr;
  int nccl_peer = 0;                    // the peer's rank in the pair
  std::vector<size_t> sends, receives;  // op indices, by first region
  size_t first_op = 0;                  // named in errors
  Round round = kInit;
  uint64_t counts[4] = {0, 0, 0, 0};  // out: messages, tag; in: the same
  std::vector<uint64_t> manifest;     // out then in: (region, bytes) each
  uint8_t* control = nullptr;
  std::vector<uint8_t*> buffers;  // released when the pair is done
  std::vector<Incoming> incoming;
  Status failed;  // the first receive that cannot complete
};

Status NcclExchange::CheckOps(const std::vector<ExchangeOp>& ops) {
  for (const ExchangeOp& op : ops) {
    auto it = peers_.find(op.peer);
    if (it == peers_.end()) {
      return Status::Internal("exchange operation names unconnected rank " +
                              std::to_string(op.peer));
    }
    if (op.kind == Kind::kGet) {
      return Status::Unimplemented(
          DescribeExchangeOp(op, it->second.name) +
          ": the nccl exchange does not offer remote reads (kGet)");
    }
    RESHARD_RETURN_NOT_OK(it->second.broken);
    RESHARD_RETURN_NOT_OK(
        memory_->CheckReachable(op, DescribeExchangeOp(op, it->second.name)));
  }
  return Status::OK();
}

Status NcclExchange::PostCounts(PairRun& pair,
                                const ExchangeRunOptions& options) {
  pair.counts[0] = pair.sends.size();
  pair.counts[1] = options.session_tag;
  RESHARD_ASSIGN_OR_RETURN(pair.control, memory_->Allocate(32));
  pair.buffers.push_back(pair.control);
  const Connection& c = *pair.conn;
  RESHARD_RETURN_NOT_OK(
      memory_->Upload(pair.counts, pair.control, 16, c.stream));
  RESHARD_RETURN_NOT_OK(api_->GroupStart());
  Status st = api_->Send(pair.control, 2, NcclDataType::kUint64, pair.nccl_peer,
                         c.comm, c.stream);
  if (st.ok()) {
    st = api_->Recv(pair.control + 16, 2, NcclDataType::kUint64, pair.nccl_peer,
                    c.comm, c.stream);
  }
  const Status end = api_->GroupEnd();
  return st.ok() ? end : st;
}

Status NcclExchange::PostManifests(PairRun& pair,
                                   const std::vector<ExchangeOp>& ops) {
  const uint64_t out = pair.sends.size();
  const uint64_t in = pair.counts[2];
  for (size_t i : pair.sends) {
    pair.manifest.push_back(ops[i].region->region);
    pair.manifest.push_back(ops[i].bytes());
  }
  pair.manifest.resize(2 * (out + in));
  RESHARD_ASSIGN_OR_RETURN(uint8_t * buffer,
                           memory_->Allocate(16 * (out + in)));
  pair.buffers.push_back(buffer);
  const Connection& c = *pair.conn;
  RESHARD_RETURN_NOT_OK(
      memory_->Upload(pair.manifest.data(), buffer, 16 * out, c.stream));
  RESHARD_RETURN_NOT_OK(api_->GroupStart());
  Status st;
  if (out > 0) {
    st = api_->Send(buffer, 2 * out, NcclDataType::kUint64, pair.nccl_peer,
                    c.comm, c.stream);
  }
  if (st.ok() && in > 0) {
    st = api_->Recv(buffer + 16 * out, 2 * in, NcclDataType::kUint64,
                    pair.nccl_peer, c.comm, c.stream);
  }
  pair.control = buffer;
  const Status end = api_->GroupEnd();
  return st.ok() ? end : st;
}

// Pairs each announced message with the receive of its first region, and
// finds where it lands: in place, a staging buffer, or scratch memory for
// one no receive takes at that size (DataLoss for the receive, reported
// once the pair's messages moved, so that the sender completes).
Status NcclExchange::MatchIncoming(PairRun& pair,
                                   const std::vector<ExchangeOp>& ops) {
  std::map<uint32_t, size_t> by_region;
  for (size_t i : pair.receives) by_region.emplace(ops[i].region->region, i);
  const uint64_t out = pair.sends.size();
  for (uint64_t j = 0; j < pair.counts[2]; ++j) {
    Incoming m;
    m.bytes = pair.manifest[2 * (out + j) + 1];
    auto it =
        by_region.find(static_cast<uint32_t>(pair.manifest[2 * (out + j)]));
    if (it != by_region.end()) {
      const ExchangeOp& op = ops[it->second];
      const bool fits = op.buffer != nullptr ? m.bytes <= op.buffer_bytes
                                             : m.bytes == op.bytes();
      if (fits) {
        m.op = it->second;
      } else if (pair.failed.ok()) {
        pair.failed = Status::DataLoss(
            DescribeExchangeOp(op, pair.conn->name) + ": received " +
            std::to_string(m.bytes) + " bytes, expected " +
            (op.buffer != nullptr ? "at most " : "") +
            std::to_string(op.bytes()));
      }
      by_region.erase(it);
    }
    if (m.op != kDiscarded) m.into = memory_->InPlace(ops[m.op]);
    if (m.into == nullptr) {
      const uint64_t size =
          m.op != kDiscarded ? std::max(m.bytes, ops[m.op].bytes()) : m.bytes;
      RESHARD_ASSIGN_OR_RETURN(m.into, memory_->Allocate(size));
      pair.buffers.push_back(m.into);
      m.staged = m.op != kDiscarded;
    }
    pair.incoming.push_back(m);
  }
  if (!by_region.empty() && pair.failed.ok()) {
    pair.failed = Status::DataLoss(
        DescribeExchangeOp(ops[by_region.begin()->second], pair.conn->name) +
        ": the peer sent no such message in this run");
  }
  return Status::OK();
}

Status NcclExchange::PostMessages(PairRun& pair,
                                  const std::vector<ExchangeOp>& ops,
                                  ExchangeStats& st) {
  const Connection& c = *pair.conn;
  std::vector<uint8_t*> from;
  for (size_t i : pair.sends) {
    const ExchangeOp& op = ops[i];
    uint8_t* p = memory_->InPlace(op);
    if (p == nullptr) {
      RESHARD_ASSIGN_OR_RETURN(p, memory_->Allocate(op.bytes()));
      pair.buffers.push_back(p);
      RESHARD_RETURN_NOT_OK(memory_->Pack(op, p, c.stream));
      if (op.buffer == nullptr) ++st.packed_messages;
    }
    from.push_back(p);
  }
  RESHARD_RETURN_NOT_OK(api_->GroupStart());
  Status status;
  for (size_t k = 0; k < pair.sends.size() && status.ok(); ++k) {
    const uint64_t bytes = ops[pair.sends[k]].bytes();
    if (bytes == 0) continue;
    status = api_->Send(from[k], bytes, NcclDataType::kUint8, pair.nccl_peer,
                        c.comm, c.stream);
  }
  for (const Incoming& m : pair.incoming) {
    if (!status.ok() || m.bytes == 0) continue;
    status = api_->Recv(m.into, m.bytes, NcclDataType::kUint8, pair.nccl_peer,
                        c.comm, c.stream);
  }
  const Status end = api_->GroupEnd();
  return status.ok() ? end : status;
}

Status NcclExchange::Unpack(PairRun& pair, const std::vector<ExchangeOp>& ops,
                            ExchangeStats& st) {
  for (const Incoming& m : pair.incoming) {
    if (m.op == kDiscarded) continue;
    const ExchangeOp& op = ops[m.op];
    if (m.staged) {
      RESHARD_RETURN_NOT_OK(memory_->Unpack(op, m.into, pair.conn->stream));
      if (op.buffer == nullptr) ++st.packed_messages;
    }
    if (op.received != nullptr) *op.received = m.bytes;
    ++st.messages_received;
    st.bytes_received += m.bytes;
    if (!op.more.empty()) st.coalesced_regions += op.more.size() + 1;
  }
  return Status::OK();
}

void NcclExchange::Finish(PairRun& pair) {
  for (uint8_t* b : pair.buffers) memory_->Release(b);
  pair.buffers.clear();
  pair.round = PairRun::kDone;
}

// Advances `pair` by one batch once its stream finished the last one.
Status NcclExchange::Step(PairRun& pair, const std::vector<ExchangeOp>& ops,
                          const ExchangeRunOptions& options, ExchangeStats& st,
                          bool* advanced) {
  if (pair.round == PairRun::kInit) {
    RESHARD_ASSIGN_OR_RETURN(bool ready, Ready(*pair.conn));
    if (!ready) return Status::OK();
  } else {
    // A non-blocking communicator may still be posting the last batch
    // (ncclInProgress): its stream holds the work only from then on.
    Result<AsyncState> state = api_->CommGetAsyncError(pair.conn->comm);
    if (!state.ok()) {
      return Status::Unavailable(
          DescribeExchangeOp(ops[pair.first_op], pair.conn->name) + ": " +
          std::string(state.status().message()));
    }
    if (*state == AsyncState::kInProgress) return Status::OK();
    RESHARD_ASSIGN_OR_RETURN(bool done, memory_->Done(pair.conn->stream));
    if (!done) return Status::OK();
  }
  *advanced = true;
  const cuda::StreamHandle stream = pair.conn->stream;
  switch (pair.round) {
    case PairRun::kInit:
      RESHARD_RETURN_NOT_OK(PostCounts(pair, options));
      break;
    case PairRun::kCounts:
      RESHARD_RETURN_NOT_OK(
          memory_->Download(pair.control + 16, pair.counts + 2, 16, stream));
      if (pair.counts[3] != options.session_tag) {
        return Status::Internal(
            DescribeExchangeOp(ops[pair.first_op], pair.conn->name) +
            ": the peer runs session tag " + std::to_string(pair.counts[3]) +
            ", this rank " + std::to_string(options.session_tag));
      }
      RESHARD_RETURN_NOT_OK(PostManifests(pair, ops));
      break;
    case PairRun::kManifests: {
      const uint64_t out = pair.sends.size();
      RESHARD_RETURN_NOT_OK(memory_->Download(pair.control + 16 * out,
                                              pair.manifest.data() + 2 * out,
                                              16 * pair.counts[2], stream));
      RESHARD_RETURN_NOT_OK(MatchIncoming(pair, ops));
      RESHARD_RETURN_NOT_OK(PostMessages(pair, ops, st));
      break;
    }
    case PairRun::kMessages:
      RESHARD_RETURN_NOT_OK(Unpack(pair, ops, st));
      break;
    case PairRun::kUnpacked:
    case PairRun::kDone:
      break;
  }
  pair.round = static_cast<PairRun::Round>(pair.round + 1);
  return Status::OK();
}

namespace {

// The ops of `ops` grouped by peer, each side ordered by first region.
std::vector<PairRun> Pairs(const std::vector<ExchangeOp>& ops,
                           std::map<uint32_t, Connection>& peers,
                           uint32_t rank) {
  std::map<uint32_t, PairRun> by_peer;
  for (size_t i = 0; i < ops.size(); ++i) {
    auto [it, made] = by_peer.try_emplace(ops[i].peer);
    PairRun& p = it->second;
    if (made) {
      p.peer = ops[i].peer;
      p.conn = &peers.at(ops[i].peer);
      p.nccl_peer = ops[i].peer < rank ? 0 : 1;
      p.first_op = i;
    }
    (ops[i].kind == Kind::kSend ? p.sends : p.receives).push_back(i);
  }
  std::vector<PairRun> pairs;
  for (auto& [peer, p] : by_peer) {
    for (auto* side : {&p.sends, &p.receives}) {
      std::stable_sort(side->begin(), side->end(), [&](size_t a, size_t b) {
        return ops[a].region->region < ops[b].region->region;
      });
    }
    pairs.push_back(std::move(p));
  }
  return pairs;
}

}  // namespace

Status NcclExchange::Run(const std::vector<ExchangeOp>& ops,
                         const ExchangeRunOptions& options,
                         ExchangeStats* stats) {
  ExchangeStats unused;
  ExchangeStats& st = stats != nullptr ? *stats : unused;
  if (options.poll_abort) RESHARD_RETURN_NOT_OK(options.poll_abort());
  RESHARD_RETURN_NOT_OK(CheckOps(ops));
  std::vector<PairRun> pairs = Pairs(ops, peers_, rank_);
  // A failed run aborts the communicators it left work on: nothing stays
  // in flight (their buffers are released where the work is seen done).
  auto fail = [&](const Status& why) {
    for (PairRun& p : pairs) {
      if (p.round == PairRun::kInit || p.round == PairRun::kDone) continue;
      Break(*p.conn, why);
      Result<bool> done = memory_->Done(p.conn->stream);
      if (done.ok() && *done) Finish(p);
    }
    return why;
  };
  bool first = true;
  // Every send of a finished pair, and every receive a message filled.
  auto complete = [&](const PairRun& p) {
    std::vector<size_t> done = p.sends;
    for (const Incoming& m : p.incoming) {
      if (m.op != kDiscarded) done.push_back(m.op);
    }
    for (size_t i : done) {
      if (first && options.on_first_completion) options.on_first_completion();
      first = false;
      if (options.on_completion) options.on_completion(i);
    }
  };
  for (PairRun& p : pairs) {
    for (size_t i : p.sends) {
      ++st.messages_sent;
      st.bytes_sent += ops[i].bytes();
      if (!ops[i].more.empty()) st.coalesced_regions += ops[i].more.size() + 1;
    }
  }
  auto last_poll = Clock::now();
  Status failed;
  while (true) {
    bool advanced = false, all_done = true;
    for (PairRun& p : pairs) {
      if (p.round == PairRun::kDone) continue;
      Status s = Step(p, ops, options, st, &advanced);
      if (!s.ok()) return fail(s);
      if (p.round == PairRun::kDone) {
        Finish(p);
        complete(p);
        if (failed.ok()) failed = p.failed;
      }
      all_done = all_done && p.round == PairRun::kDone;
    }
    if (all_done) return failed;
    if (advanced) continue;
    const auto now = Clock::now();
    for (const PairRun& p : pairs) {
      if (p.round == PairRun::kDone) continue;
      if (now >= options.deadline) {
        return fail(Status::Unavailable(
            "timed out " + DescribeExchangeOp(ops[p.first_op], p.conn->name)));
      }
      if (p.round == PairRun::kInit) continue;
      Result<AsyncState> state = api_->CommGetAsyncError(p.conn->comm);
      if (!state.ok()) {
        return fail(Status::Unavailable(
            DescribeExchangeOp(ops[p.first_op], p.conn->name) + ": " +
            std::string(state.status().message())));
      }
    }
    if (options.poll_abort && now - last_poll >= options.abort_poll_interval) {
      last_poll = now;
      Status abort = options.poll_abort();
      if (!abort.ok()) return fail(abort);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace reshard::nccl
