// An ObjectStore in memory, for the fuzz targets that decode store records
// (no filesystem traffic per input). Single-threaded use only.

#ifndef RESHARD_FUZZ_MEMORY_OBJECT_STORE_H_
#define RESHARD_FUZZ_MEMORY_OBJECT_STORE_H_

#include <cstring>
#include <map>
#include <string>

#include "reshard/object_store.h"

namespace reshard::fuzz {

class MemoryObjectStore : public ObjectStore {
 public:
  Status Put(std::string_view key, std::string_view value) override {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
    if (!data_.emplace(std::string(key), std::string(value)).second) {
      return Status::AlreadyExists(std::string(key));
    }
    return Status::OK();
  }
  Result<std::string> Get(std::string_view key) override {
    auto it = data_.find(std::string(key));
    if (it == data_.end()) return Status::NotFound(std::string(key));
    return it->second;
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::vector<std::string> out;
    for (auto it = data_.lower_bound(std::string(prefix));
         it != data_.end() && it->first.starts_with(prefix); ++it) {
      out.push_back(it->first);
    }
    return out;
  }
  Status Delete(std::string_view key) override {
    data_.erase(std::string(key));
    return Status::OK();
  }
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   bool durable) override {
    std::string value;
    for (const ConstBuffer& p : parts) {
      value.append(static_cast<const char*>(p.data), p.size);
    }
    return Put(key, value);
  }
  Status Sync() override { return Status::OK(); }
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    for (const ReadRange& r : ranges) {
      auto it = data_.find(r.key);
      if (it == data_.end()) return Status::NotFound(r.key);
      if (r.offset > it->second.size() ||
          r.length > it->second.size() - r.offset) {
        return Status::DataLoss("short read: " + r.key);
      }
      std::memcpy(r.dest, it->second.data() + r.offset, r.length);
    }
    return Status::OK();
  }
  Result<uint64_t> ObjectSize(std::string_view key) override {
    RESHARD_ASSIGN_OR_RETURN(std::string v, Get(key));
    return v.size();
  }
  Result<uint64_t> RemoveStaleTemporaries(std::chrono::seconds) override {
    return 0;
  }
  const std::string& uri() const override { return uri_; }

 private:
  std::map<std::string, std::string, std::less<>> data_;
  std::string uri_ = "memory://fuzz";
};

}  // namespace reshard::fuzz

#endif  // RESHARD_FUZZ_MEMORY_OBJECT_STORE_H_
