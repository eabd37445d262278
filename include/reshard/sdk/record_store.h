// Small immutable records under '/'-separated keys: the rendezvous of live
// sessions and the control records of the weight store.
//
// Keys are one or more components of [A-Za-z0-9._~%-] (no empty component,
// none starting with '.'), joined by '/'.
//
// Thread and process contract: every method may be called concurrently from
// any thread of any process that shares the backend. Put is create-only and
// atomic: a reader sees either no record or the whole record, and of two
// racing writers of one key exactly one succeeds (the other gets
// AlreadyExists and its bytes are discarded).

#ifndef RESHARD_SDK_RECORD_STORE_H_
#define RESHARD_SDK_RECORD_STORE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace reshard {

class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Publishes `value` under `key`; AlreadyExists if the key exists.
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // The record's bytes; NotFound if absent.
  virtual Result<std::string> Get(std::string_view key) = 0;
  // Every key that starts with `prefix`, sorted.
  virtual Result<std::vector<std::string>> List(std::string_view prefix) = 0;
  // Removes the record; OK if it was absent.
  virtual Status Delete(std::string_view key) = 0;
};

// When a written record or object survives a crash.
enum class Durability {
  kDurable,     // before Put (PutObject) returns
  kAtNextSync,  // visible and complete at once, durable after Sync()
};

// Checks the key syntax above; the message names the key.
Status ValidateRecordKey(std::string_view key);

}  // namespace reshard

#endif  // RESHARD_SDK_RECORD_STORE_H_
