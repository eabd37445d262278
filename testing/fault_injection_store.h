// An ObjectStore wrapper that injects one fault into the N-th call of the
// kinds a fault applies to, for sweeping the weight store's error paths over
// a real backend.
//
// Faults model what a storage system does when it fails:
//   kIOError       the call fails with an EIO-like IOError and changes
//                  nothing;
//   kNoSpace       a write (Put, PutObject, Sync) fails with an ENOSPC-like
//                  ResourceExhausted and changes nothing;
//   kLostAck       a write or delete (Put, PutObject, Delete, Sync) takes
//                  effect, then reports IOError (the acknowledgement was
//                  lost);
//   kShortRead     a read (Get, ReadRanges) returns OK with the tail missing:
//                  Get returns a truncated value, ReadRanges leaves the
//                  second half of its last non-empty range unwritten;
//   kShortReadError  ReadRanges fills the ranges up to the second half of the
//                  last non-empty one, then fails with DataLoss; Get fails
//                  with DataLoss;
//   kTornWrite     Put / PutObject publish the first half of the bytes, then
//                  report IOError;
//   kCorruptWrite  Put / PutObject publish the bytes with one bit flipped (at
//                  a position from the seed and the size) and report success;
//   kLatency       every call kind: the call waits, then runs normally.
// kTornWrite and kCorruptWrite break the ObjectStore contract (objects are
// atomic and exact); they model a faulty backend whose damage only the
// weight store's own checks can catch.
//
// Deterministic: the N-th call is counted in call order (the wrapper
// serializes the counting, not the calls), and the corrupted bit depends
// only on the seed and the size of the value. Thread-safe.

#ifndef RESHARD_TESTING_FAULT_INJECTION_STORE_H_
#define RESHARD_TESTING_FAULT_INJECTION_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"

namespace reshard::testing {

// The ObjectStore methods, as bits of a call-kind mask.
enum StoreCall : uint32_t {
  kCallPut = 1u << 0,
  kCallGet = 1u << 1,
  kCallList = 1u << 2,
  kCallDelete = 1u << 3,
  kCallPutObject = 1u << 4,
  kCallSync = 1u << 5,
  kCallReadRanges = 1u << 6,
  kCallObjectSize = 1u << 7,
  kCallRemoveStaleTemporaries = 1u << 8,
  kAllCalls = (1u << 9) - 1,
};

std::string_view StoreCallName(StoreCall call);

enum class FaultKind {
  kIOError,
  kNoSpace,
  kLostAck,
  kShortRead,
  kShortReadError,
  kTornWrite,
  kCorruptWrite,
  kLatency,
};

std::string_view FaultKindName(FaultKind kind);

// Every fault kind, in declaration order.
const std::vector<FaultKind>& AllFaultKinds();

// The call kinds `kind` applies to.
uint32_t CallsOf(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kIOError;
  // The 1-based index, among counted calls, of the call to fail; 0 counts
  // calls without injecting anything.
  uint64_t nth = 0;
  // Calls counted: those in `calls` that `kind` applies to.
  uint32_t calls = kAllCalls;
  std::chrono::microseconds latency{2000};
  uint64_t seed = 1;
};

class FaultInjectionStore : public ObjectStore {
 public:
  explicit FaultInjectionStore(std::shared_ptr<ObjectStore> inner);

  // Starts counting calls under `spec` (counters restart at zero).
  void Arm(const FaultSpec& spec);
  // Stops counting and injecting; the counters keep their values.
  void Disarm();

  // Calls counted since Arm.
  uint64_t calls() const;
  // Faults injected since Arm (0 or 1).
  uint64_t injected() const;
  // "<kind> in <call> <key>" of the fault injected since Arm ("" if none).
  std::string last_fault() const;

  ObjectStore& inner() const { return *inner_; }

  Status Put(std::string_view key, std::string_view value) override;
  Result<std::string> Get(std::string_view key) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  Status Delete(std::string_view key) override;
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability) override;
  Status Sync() override;
  Status ReadRanges(const std::vector<ReadRange>& ranges) override;
  Result<uint64_t> ObjectSize(std::string_view key) override;
  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override;
  const std::string& uri() const override { return inner_->uri(); }
  uint64_t PreferredReadBytes() const override {
    return inner_->PreferredReadBytes();
  }

 private:
  // Counts the call; the armed spec when it is the one to fail (recorded
  // as injected, with `key` in the description). Latency is served here.
  std::optional<FaultSpec> Hit(StoreCall call, std::string_view key);
  // The error `spec` injects into `call`.
  static Status Injected(const FaultSpec& spec, StoreCall call,
                         std::string_view key);
  // `value` as the write fault of `spec` leaves it.
  static std::string Damage(const FaultSpec& spec, std::string_view value);

  std::shared_ptr<ObjectStore> inner_;
  mutable std::mutex mu_;
  bool armed_ = false;
  FaultSpec spec_;
  uint64_t calls_ = 0;
  uint64_t injected_ = 0;
  std::string last_fault_;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_FAULT_INJECTION_STORE_H_
