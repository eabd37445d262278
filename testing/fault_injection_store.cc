#include "testing/fault_injection_store.h"

#include <optional>
#include <thread>
#include <utility>

namespace reshard::testing {

std::string_view StoreCallName(StoreCall call) {
  switch (call) {
    case kCallPut:
      return "Put";
    case kCallGet:
      return "Get";
    case kCallList:
      return "List";
    case kCallDelete:
      return "Delete";
    case kCallPutObject:
      return "PutObject";
    case kCallSync:
      return "Sync";
    case kCallReadRanges:
      return "ReadRanges";
    case kCallObjectSize:
      return "ObjectSize";
    case kCallRemoveStaleTemporaries:
      return "RemoveStaleTemporaries";
    case kAllCalls:
      break;
  }
  return "?";
}

std::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIOError:
      return "eio";
    case FaultKind::kNoSpace:
      return "enospc";
    case FaultKind::kLostAck:
      return "lost-ack";
    case FaultKind::kShortRead:
      return "short-read";
    case FaultKind::kShortReadError:
      return "short-read-error";
    case FaultKind::kTornWrite:
      return "torn-write";
    case FaultKind::kCorruptWrite:
      return "corrupt-write";
    case FaultKind::kLatency:
      return "latency";
  }
  return "?";
}

const std::vector<FaultKind>& AllFaultKinds() {
  static const std::vector<FaultKind> kAll = {
      FaultKind::kIOError,        FaultKind::kNoSpace,
      FaultKind::kLostAck,        FaultKind::kShortRead,
      FaultKind::kShortReadError, FaultKind::kTornWrite,
      FaultKind::kCorruptWrite,   FaultKind::kLatency};
  return kAll;
}

uint32_t CallsOf(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIOError:
    case FaultKind::kLatency:
      return kAllCalls;
    case FaultKind::kNoSpace:
      return kCallPut | kCallPutObject | kCallSync;
    case FaultKind::kLostAck:
      return kCallPut | kCallPutObject | kCallDelete | kCallSync;
    case FaultKind::kShortRead:
      return kCallGet | kCallReadRanges;
    case FaultKind::kShortReadError:
      return kCallGet | kCallReadRanges;
    case FaultKind::kTornWrite:
    case FaultKind::kCorruptWrite:
      return kCallPut | kCallPutObject;
  }
  return 0;
}

FaultInjectionStore::FaultInjectionStore(std::shared_ptr<ObjectStore> inner)
    : inner_(std::move(inner)) {}

void FaultInjectionStore::Arm(const FaultSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  spec_ = spec;
  calls_ = 0;
  injected_ = 0;
  last_fault_.clear();
}

void FaultInjectionStore::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

uint64_t FaultInjectionStore::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

uint64_t FaultInjectionStore::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

std::string FaultInjectionStore::last_fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_fault_;
}

std::optional<FaultSpec> FaultInjectionStore::Hit(StoreCall call,
                                                  std::string_view key) {
  std::chrono::microseconds wait{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_ || (call & spec_.calls & CallsOf(spec_.kind)) == 0) {
      return std::nullopt;
    }
    if (++calls_ != spec_.nth) return std::nullopt;
    ++injected_;
    last_fault_ = std::string(FaultKindName(spec_.kind)) + " in " +
                  std::string(StoreCallName(call)) + " " + std::string(key);
    if (spec_.kind != FaultKind::kLatency) return spec_;
    wait = spec_.latency;
  }
  // Latency: the call then runs normally.
  std::this_thread::sleep_for(wait);
  return std::nullopt;
}

Status FaultInjectionStore::Injected(const FaultSpec& spec, StoreCall call,
                                     std::string_view key) {
  const std::string where = " in " + std::string(StoreCallName(call)) +
                            (key.empty() ? "" : " " + std::string(key));
  switch (spec.kind) {
    case FaultKind::kNoSpace:
      return Status::ResourceExhausted(
          "injected fault: No space left on device (ENOSPC)" + where);
    case FaultKind::kShortRead:
    case FaultKind::kShortReadError:
      return Status::DataLoss("injected fault: short read" + where);
    default:
      return Status::IOError("injected fault: Input/output error (EIO)" +
                             where);
  }
}

std::string FaultInjectionStore::Damage(const FaultSpec& spec,
                                        std::string_view value) {
  if (spec.kind == FaultKind::kTornWrite) {
    return std::string(value.substr(0, value.size() / 2));
  }
  // kCorruptWrite: one bit, at a position from the seed and the size only
  // (the same damage whatever ids or times the value holds).
  std::string out(value);
  if (out.empty()) return std::string(1, '\x01');
  uint64_t h = (spec.seed + 1) * 0x9E3779B97F4A7C15u ^ out.size();
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9u;
  h ^= h >> 32;
  out[h % out.size()] ^= static_cast<char>(1u << ((h >> 40) % 8));
  return out;
}

Status FaultInjectionStore::Put(std::string_view key, std::string_view value) {
  const auto f = Hit(kCallPut, key);
  if (!f) return inner_->Put(key, value);
  switch (f->kind) {
    case FaultKind::kLostAck:
      RESHARD_RETURN_NOT_OK(inner_->Put(key, value));
      break;
    case FaultKind::kTornWrite:
      RESHARD_RETURN_NOT_OK(inner_->Put(key, Damage(*f, value)));
      break;
    case FaultKind::kCorruptWrite:
      return inner_->Put(key, Damage(*f, value));
    default:
      break;
  }
  return Injected(*f, kCallPut, key);
}

Result<std::string> FaultInjectionStore::Get(std::string_view key) {
  const auto f = Hit(kCallGet, key);
  if (!f) return inner_->Get(key);
  if (f->kind == FaultKind::kShortRead) {
    RESHARD_ASSIGN_OR_RETURN(std::string value, inner_->Get(key));
    value.resize(value.size() / 2);
    return value;
  }
  return Injected(*f, kCallGet, key);
}

Result<std::vector<std::string>> FaultInjectionStore::List(
    std::string_view prefix) {
  const auto f = Hit(kCallList, prefix);
  if (!f) return inner_->List(prefix);
  return Injected(*f, kCallList, prefix);
}

Status FaultInjectionStore::Delete(std::string_view key) {
  const auto f = Hit(kCallDelete, key);
  if (!f) return inner_->Delete(key);
  if (f->kind == FaultKind::kLostAck)
    RESHARD_RETURN_NOT_OK(inner_->Delete(key));
  return Injected(*f, kCallDelete, key);
}

Status FaultInjectionStore::PutObject(std::string_view key,
                                      const std::vector<ConstBuffer>& parts,
                                      Durability durability) {
  const auto f = Hit(kCallPutObject, key);
  if (!f) return inner_->PutObject(key, parts, durability);
  switch (f->kind) {
    case FaultKind::kLostAck:
      RESHARD_RETURN_NOT_OK(inner_->PutObject(key, parts, durability));
      break;
    case FaultKind::kTornWrite:
    case FaultKind::kCorruptWrite: {
      std::string whole;
      for (const ConstBuffer& p : parts) {
        whole.append(static_cast<const char*>(p.data), p.size);
      }
      const std::string damaged = Damage(*f, whole);
      RESHARD_RETURN_NOT_OK(inner_->PutObject(
          key, {{damaged.data(), damaged.size()}}, durability));
      if (f->kind == FaultKind::kCorruptWrite) return Status::OK();
      break;
    }
    default:
      break;
  }
  return Injected(*f, kCallPutObject, key);
}

Status FaultInjectionStore::Sync() {
  const auto f = Hit(kCallSync, "");
  if (!f) return inner_->Sync();
  if (f->kind == FaultKind::kLostAck) RESHARD_RETURN_NOT_OK(inner_->Sync());
  return Injected(*f, kCallSync, "");
}

Status FaultInjectionStore::ReadRanges(const std::vector<ReadRange>& ranges) {
  size_t last = ranges.size();
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].length > 0) last = i;
  }
  const std::string key = last < ranges.size() ? ranges[last].key : "";
  const auto f = Hit(kCallReadRanges, key);
  if (!f) return inner_->ReadRanges(ranges);
  if (f->kind == FaultKind::kShortRead ||
      f->kind == FaultKind::kShortReadError) {
    // Everything but the second half of the last non-empty range.
    std::vector<ReadRange> partial = ranges;
    if (last < partial.size()) partial[last].length /= 2;
    RESHARD_RETURN_NOT_OK(inner_->ReadRanges(partial));
    if (f->kind == FaultKind::kShortRead) return Status::OK();
  }
  return Injected(*f, kCallReadRanges, key);
}

Result<uint64_t> FaultInjectionStore::ObjectSize(std::string_view key) {
  const auto f = Hit(kCallObjectSize, key);
  if (!f) return inner_->ObjectSize(key);
  return Injected(*f, kCallObjectSize, key);
}

Result<uint64_t> FaultInjectionStore::RemoveStaleTemporaries(
    std::chrono::seconds older_than) {
  const auto f = Hit(kCallRemoveStaleTemporaries, "");
  if (!f) {
    return inner_->RemoveStaleTemporaries(older_than);
  }
  return Injected(*f, kCallRemoveStaleTemporaries, "");
}

}  // namespace reshard::testing
