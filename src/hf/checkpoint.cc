// HfCheckpoint::Open: the files of a checkpoint directory, their headers
// checked, kept open read-only for loads.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "hf/checkpoint_state.h"
#include "util/json_reader.h"
#include "util/printable.h"

namespace reshard {
namespace {

using internal::FileDescriptor;
using internal::Printable;

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSuffix = ".safetensors";
// An index is a few MB even for the largest models.
constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;

// A file name of the directory itself: no separator, not "." or "..".
bool PlainName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// Opens `name` in `dir` read-only (following a symbolic link, never
// blocking on a FIFO) and requires a regular file.
Result<FileDescriptor> OpenRegular(int dir, const std::string& path,
                                   const std::string& name, uint64_t* size) {
  auto fd = internal::OpenRegularFileAt(dir, name, path + "/" + name, size);
  if (fd.status().IsNotFound()) {
    return Status::NotFound(Printable(path + "/" + name) + ": no such file");
  }
  return fd;
}

// The index's weight_map: tensor -> file.
Result<std::map<std::string, std::string>> ReadIndex(int dir,
                                                     const std::string& path) {
  const std::string where = path + "/" + std::string(kIndexName);
  uint64_t size = 0;
  RESHARD_ASSIGN_OR_RETURN(
      FileDescriptor fd,
      OpenRegular(dir, path, std::string(kIndexName), &size));
  if (size > kMaxIndexBytes) {
    return Status::InvalidArgument(Printable(where) + " is larger than " +
                                   std::to_string(kMaxIndexBytes) + " bytes");
  }
  std::string text(size, '\0');
  RESHARD_RETURN_NOT_OK(
      internal::PreadAll(fd.get(), text.data(), size, 0, where));
  auto doc = internal::JsonDocument::Parse(text);
  if (!doc.ok()) return doc.status().WithContext(Printable(where));
  internal::JsonPath root;
  auto obj = internal::StrictObject::Make(doc->root(), root, "index",
                                          {"weight_map"}, {"metadata"});
  if (!obj.ok()) return obj.status().WithContext(Printable(where));
  simdjson::dom::object map;
  if (obj->Get("weight_map").get_object().get(map) != simdjson::SUCCESS) {
    return Status::InvalidArgument(Printable(where) +
                                   ": weight_map must be an object");
  }
  std::map<std::string, std::string> out;
  for (auto field : map) {
    std::string_view file;
    if (field.value.get_string().get(file) != simdjson::SUCCESS ||
        !PlainName(file) || !file.ends_with(kSuffix)) {
      return Status::InvalidArgument(
          Printable(where) + ": weight_map entry " + Printable(field.key) +
          " must name a .safetensors file of the directory");
    }
    if (!out.emplace(std::string(field.key), std::string(file)).second) {
      return Status::InvalidArgument(Printable(where) +
                                     ": duplicate weight_map entry " +
                                     Printable(field.key));
    }
  }
  if (out.empty()) {
    return Status::InvalidArgument(Printable(where) + ": empty weight_map");
  }
  return out;
}

// Every "*.safetensors" entry of the directory, sorted.
Result<std::vector<std::string>> ListFiles(int dir, const std::string& path) {
  const int again = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = again < 0 ? nullptr : ::fdopendir(again);
  if (d == nullptr) {
    if (again >= 0) ::close(again);
    return internal::ErrnoStatus("cannot list", path);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() > kSuffix.size() && name.ends_with(kSuffix)) {
      names.emplace_back(name);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return Status::NotFound(Printable(path) + " holds no .safetensors files");
  }
  return names;
}

// Reads and checks one file's header.
Result<SafetensorsHeader> ReadHeader(int fd, const std::string& name,
                                     uint64_t size) {
  char first8[8] = {};
  if (size >= 8) {
    RESHARD_RETURN_NOT_OK(internal::PreadAll(fd, first8, 8, 0, name));
  }
  RESHARD_ASSIGN_OR_RETURN(
      uint64_t n,
      ParseSafetensorsPrefix(name, std::string_view(first8, 8), size));
  std::string json(n, '\0');
  RESHARD_RETURN_NOT_OK(internal::PreadAll(fd, json.data(), n, 8, name));
  return ParseSafetensorsHeader(name, json, size);
}

// Adds one file's tensors; a tensor already seen in another file, or one
// the index places elsewhere, is an error.
Status AddFile(HfCheckpoint::State* s, const std::string& name,
               const SafetensorsHeader& h,
               const std::map<std::string, std::string>* index,
               std::unordered_map<std::string, std::string>* seen) {
  for (const SafetensorsTensor& t : h.tensors) {
    auto [it, fresh] = seen->emplace(t.name, name);
    if (!fresh) {
      return Status::InvalidArgument("duplicate tensor " + Printable(t.name) +
                                     " in " + Printable(it->second) + " and " +
                                     Printable(name));
    }
    if (index != nullptr) {
      auto in = index->find(t.name);
      if (in == index->end() || in->second != name) {
        return Status::InvalidArgument(
            Printable(name) + ": tensor " + Printable(t.name) +
            (in == index->end()
                 ? std::string(" is not in ") + std::string(kIndexName)
                 : " is mapped to " + Printable(in->second) + " by " +
                       std::string(kIndexName)));
      }
    }
    const SafetensorsDtype* dt = FindSafetensorsDtype(t.dtype);
    s->tensors.push_back({t.name, name, std::string(dt->placement),
                          dt->itemsize, t.shape, h.data_offset + t.begin,
                          t.end - t.begin});
    s->tensor_bytes += t.end - t.begin;
  }
  return Status::OK();
}

}  // namespace

Result<HfCheckpoint> HfCheckpoint::Open(const std::string& dir) {
  auto s = std::make_shared<State>();
  s->dir = dir;
  FileDescriptor dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return internal::ErrnoStatus("cannot open directory", dir);
  std::optional<std::map<std::string, std::string>> index;
  std::vector<std::string> names;
  struct stat sb;
  if (::fstatat(dfd.get(), std::string(kIndexName).c_str(), &sb, 0) == 0) {
    RESHARD_ASSIGN_OR_RETURN(index, ReadIndex(dfd.get(), dir));
    std::set<std::string> files;
    for (const auto& [tensor, file] : *index) files.insert(file);
    names.assign(files.begin(), files.end());
  } else {
    RESHARD_ASSIGN_OR_RETURN(names, ListFiles(dfd.get(), dir));
  }
  std::unordered_map<std::string, std::string> seen;
  for (const std::string& name : names) {
    uint64_t size = 0;
    auto fd = OpenRegular(dfd.get(), dir, name, &size);
    if (!fd.ok()) {
      if (index && fd.status().IsNotFound()) {
        return Status::NotFound(std::string(kIndexName) + " names " +
                                Printable(name) + ", which is not in " +
                                Printable(dir));
      }
      return fd.status();
    }
    ::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    RESHARD_ASSIGN_OR_RETURN(auto header, ReadHeader(fd->get(), name, size));
    RESHARD_RETURN_NOT_OK(
        AddFile(s.get(), name, header, index ? &*index : nullptr, &seen));
    s->header_bytes += header.data_offset;
    s->files.push_back({name, size, header.data_offset, header.metadata});
    s->fds.push_back(std::move(*fd));
  }
  if (index) {
    for (const auto& [tensor, file] : *index) {
      if (!seen.count(tensor)) {
        return Status::InvalidArgument(
            std::string(kIndexName) + " maps tensor " + Printable(tensor) +
            " to " + Printable(file) + ", which does not hold it");
      }
    }
  }
  std::sort(s->tensors.begin(), s->tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return HfCheckpoint(std::move(s));
}

const std::string& HfCheckpoint::directory() const { return state_->dir; }
const std::vector<CheckpointFile>& HfCheckpoint::files() const {
  return state_->files;
}
const std::vector<CheckpointTensor>& HfCheckpoint::tensors() const {
  return state_->tensors;
}
uint64_t HfCheckpoint::tensor_bytes() const { return state_->tensor_bytes; }
uint64_t HfCheckpoint::header_bytes() const { return state_->header_bytes; }

const CheckpointTensor* HfCheckpoint::FindTensor(std::string_view name) const {
  const auto& t = state_->tensors;
  auto it = std::lower_bound(
      t.begin(), t.end(), name,
      [](const CheckpointTensor& a, std::string_view n) { return a.name < n; });
  return it != t.end() && it->name == name ? &*it : nullptr;
}

}  // namespace reshard
