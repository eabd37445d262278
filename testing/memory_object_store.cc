#include "testing/memory_object_store.h"

#include <cstring>

namespace reshard::testing {

Status MemoryObjectStore::Insert(std::string_view key, std::string value) {
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  // As on a filesystem, a key is either a record or a directory of
  // records, never both.
  const std::string below = std::string(key) + "/";
  auto after = data_.lower_bound(below);
  if (after != data_.end() && after->first.starts_with(below)) {
    return Status::InvalidArgument("record key " + std::string(key) +
                                   " names a directory of records");
  }
  for (size_t slash = key.find('/'); slash != std::string_view::npos;
       slash = key.find('/', slash + 1)) {
    if (data_.count(key.substr(0, slash))) {
      return Status::InvalidArgument("record key " + std::string(key) +
                                     " is below the record " +
                                     std::string(key.substr(0, slash)));
    }
  }
  if (!data_.emplace(std::string(key), std::move(value)).second) {
    return Status::AlreadyExists("record exists: " + std::string(key));
  }
  return Status::OK();
}

Status MemoryObjectStore::Put(std::string_view key, std::string_view value) {
  return Insert(key, std::string(value));
}

Status MemoryObjectStore::PutObject(std::string_view key,
                                    const std::vector<ConstBuffer>& parts,
                                    Durability) {
  std::string value;
  for (const ConstBuffer& p : parts) {
    value.append(static_cast<const char*>(p.data), p.size);
  }
  return Insert(key, std::move(value));
}

Result<std::string> MemoryObjectStore::Get(std::string_view key) {
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) {
    return Status::NotFound("no record " + std::string(key));
  }
  return it->second;
}

Result<std::vector<std::string>> MemoryObjectStore::List(
    std::string_view prefix) {
  // A prefix is a key, or a key and '/', or empty (every key).
  std::string_view whole = prefix;
  if (whole.ends_with('/')) whole.remove_suffix(1);
  if (!whole.empty()) RESHARD_RETURN_NOT_OK(ValidateRecordKey(whole));
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (auto it = data_.lower_bound(prefix);
       it != data_.end() && it->first.starts_with(prefix); ++it) {
    out.push_back(it->first);
  }
  return out;
}

Status MemoryObjectStore::Delete(std::string_view key) {
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it != data_.end()) data_.erase(it);
  return Status::OK();
}

Status MemoryObjectStore::ReadRanges(const std::vector<ReadRange>& ranges) {
  for (const ReadRange& r : ranges) {
    RESHARD_RETURN_NOT_OK(ValidateRecordKey(r.key));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const ReadRange& r : ranges) {
    auto it = data_.find(r.key);
    if (it == data_.end()) {
      return Status::NotFound("no object " + r.key);
    }
    if (r.offset > it->second.size() ||
        r.length > it->second.size() - r.offset) {
      return Status::DataLoss("short object " + r.key + ": range [" +
                              std::to_string(r.offset) + ", +" +
                              std::to_string(r.length) + ") of " +
                              std::to_string(it->second.size()) + " bytes");
    }
    if (r.length > 0) {
      std::memcpy(r.dest, it->second.data() + r.offset, r.length);
    }
  }
  return Status::OK();
}

Result<uint64_t> MemoryObjectStore::ObjectSize(std::string_view key) {
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) {
    return Status::NotFound("no object " + std::string(key));
  }
  return uint64_t{it->second.size()};
}

}  // namespace reshard::testing
