// Per-participant parameter files (safetensors) and their host memory.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "engine/padding.h"
#include "reshard/engine.h"
#include "util/dims_text.h"
#include "util/file_io.h"
#include "util/host_memory.h"
#include "util/mapped_file.h"
#include "util/printable.h"
#include "util/sha256.h"

namespace reshard {

using internal::DimsText;
using internal::ErrnoStatus;
using internal::FileDescriptor;
using internal::Printable;

Result<ParameterMemory> ParameterMemory::Allocate(const EngineParticipant& p) {
  ParameterMemory m;
  for (const EngineParameter& q : p.parameters) {
    const uint64_t n = q.nbytes();
    if (n == 0) {  // a zero-size parameter: no memory, a null buffer
      m.buffers_[q.name] = {nullptr, 0};
      continue;
    }
    internal::HostBuffer data = internal::AllocateHostBytes(n);
    if (data == nullptr) {
      return Status::ResourceExhausted("cannot allocate " + std::to_string(n) +
                                       " bytes for parameter " + q.name);
    }
    // Only the padding (zeros, fills) is written here: the rest is the
    // caller's to fill, and its first write faults the pages in (huge ones
    // when large).
    for (const ParameterPiece& piece : q.pieces) {
      if (piece.padding()) internal::WritePadding(data.get(), piece);
    }
    m.buffers_[q.name] = {data.get(), n};
    m.blocks_.emplace_back(data.release());
    m.bytes_ += n;
  }
  return m;
}

namespace {

constexpr std::string_view kParticipantKey = "reshard.participant_id";
constexpr std::string_view kPlacementKey = "reshard.placement_id";
constexpr std::string_view kParameterMapKey = "reshard.parameter_map_id";
constexpr std::string_view kRevisionKey = "reshard.revision";
constexpr std::string_view kGenerationKey = "reshard.weight_generation";

}  // namespace

std::string ParameterFileIdentity::ToString() const {
  auto or_none = [](const std::string& id) {
    return id.empty() ? std::string("none") : Printable(id);
  };
  return "participant " + or_none(participant_id) + ", placement " +
         or_none(placement_id) + " (revision " + or_none(revision) +
         ", weight generation " + std::to_string(weight_generation) +
         "), parameter map " + or_none(parameter_map_id);
}

ParameterFileIdentity ParameterFileIdentityOf(const EngineLayout& layout,
                                              std::string_view participant_id,
                                              std::string parameter_map_id) {
  const WeightPlacementManifest& placement = layout.placement();
  return {std::string(participant_id), placement.placement_id(),
          std::move(parameter_map_id), placement.revision(),
          placement.weight_generation()};
}

ParameterFileExpectation ExpectParameterFile(const EngineLayout& layout,
                                             std::string_view participant_id,
                                             std::string parameter_map_id) {
  ParameterFileExpectation expect;
  expect.identity = ParameterFileIdentityOf(layout, participant_id,
                                            std::move(parameter_map_id));
  // One placement id per revision met, shared by the copies.
  auto ids = std::make_shared<
      std::map<std::pair<std::string, uint64_t>, std::string>>();
  expect.placement_id_at = [placement = layout.placement(), ids](
                               const std::string& revision,
                               uint64_t generation) -> Result<std::string> {
    auto key = std::make_pair(revision, generation);
    auto it = ids->find(key);
    if (it != ids->end()) return it->second;
    RESHARD_ASSIGN_OR_RETURN(auto at,
                             WithRevision(placement, revision, generation));
    return (*ids)[key] = at.placement_id();
  };
  return expect;
}

Status WriteParameterFile(const std::string& path,
                          const EngineParticipant& participant,
                          const ParameterBuffers& buffers,
                          const ParameterFileIdentity& identity) {
  if (identity.participant_id != participant.participant_id) {
    return Status::InvalidArgument(
        "cannot write the parameters of participant " +
        participant.participant_id + " under the identity of " +
        identity.ToString());
  }
  std::vector<SafetensorsTensor> tensors;
  std::vector<const void*> data;
  uint64_t at = 0;
  for (const EngineParameter& q : participant.parameters) {
    const SafetensorsDtype* dt = FindSafetensorsDtypeByPlacement(q.dtype);
    auto it = buffers.find(q.name);
    if (dt == nullptr || it == buffers.end() ||
        it->second.nbytes != q.nbytes()) {
      return Status::InvalidArgument(
          "cannot write parameter " + q.name + " of participant " +
          participant.participant_id + ": no buffer of its size or no dtype");
    }
    tensors.push_back(
        {q.name, std::string(dt->name), q.shape, at, at + q.nbytes()});
    data.push_back(it->second.data);
    at += q.nbytes();
  }
  const std::string header = EncodeSafetensorsHeader(
      tensors, {{"format", "pt"},
                {std::string(kParticipantKey), identity.participant_id},
                {std::string(kPlacementKey), identity.placement_id},
                {std::string(kParameterMapKey), identity.parameter_map_id},
                {std::string(kRevisionKey), identity.revision},
                {std::string(kGenerationKey),
                 std::to_string(identity.weight_generation)}});
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    return Status::AlreadyExists("refusing to replace " + Printable(path));
  }
  const std::string partial = path + ".partial";
  FileDescriptor fd(
      ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus("cannot create", partial);
  Status s =
      internal::PwriteAll(fd.get(), header.data(), header.size(), 0, partial);
  uint64_t offset = header.size();
  for (size_t i = 0; s.ok() && i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].end - tensors[i].begin;
    s = internal::PwriteAll(fd.get(), data[i], n, offset, partial);
    offset += n;
  }
  if (s.ok() && ::fsync(fd.get()) != 0) s = ErrnoStatus("cannot sync", partial);
  fd.Reset();
  // link() never replaces: a file that appeared at `path` meanwhile stays.
  if (s.ok() && ::link(partial.c_str(), path.c_str()) != 0) {
    s = errno == EEXIST
            ? Status::AlreadyExists("refusing to replace " + Printable(path))
            : ErrnoStatus("cannot link into place", path);
  }
  ::unlink(partial.c_str());
  return s;
}

namespace {

// Whether the file's metadata says it is the one `expect` asks for: its
// participant and parameter map, and its placement at the file's revision
// and weight generation (a file of another revision of the same layout
// fills the same slot).
Status CheckIdentity(const std::string& path, const SafetensorsHeader& header,
                     const EngineParticipant& participant,
                     const ParameterFileExpectation& expect) {
  ParameterFileIdentity found;
  std::string generation;
  bool any = false;
  for (auto [key, id] : {std::pair{kParticipantKey, &found.participant_id},
                         std::pair{kPlacementKey, &found.placement_id},
                         std::pair{kParameterMapKey, &found.parameter_map_id},
                         std::pair{kRevisionKey, &found.revision},
                         std::pair{kGenerationKey, &generation}}) {
    auto it = header.metadata.find(std::string(key));
    if (it == header.metadata.end()) continue;
    *id = it->second;
    any = true;
  }
  if (!any) {
    if (expect.trust_file_names) return Status::OK();
    return Status::FailedPrecondition(
        Printable(path) + " carries no identity (no " +
        std::string(kParticipantKey) + " or the other reshard.* keys in its " +
        "metadata): refused as the file of participant " +
        participant.participant_id + " unless file names are trusted");
  }
  // A weight generation as the placement writes one: decimal digits (no
  // sign, no space), no leading zero, within 64 bits.
  const char* end = generation.data() + generation.size();
  const auto [parsed, error] =
      std::from_chars(generation.data(), end, found.weight_generation);
  const bool generation_ok = !generation.empty() && error == std::errc() &&
                             parsed == end &&
                             (generation.size() == 1 || generation[0] != '0');
  if (!generation_ok) {
    return Status::InvalidArgument(
        Printable(path) + ": its metadata's " + std::string(kGenerationKey) +
        " \"" + Printable(generation) + "\" is not a weight generation");
  }
  const ParameterFileIdentity& want = expect.identity;
  bool same = found.participant_id == want.participant_id &&
              found.parameter_map_id == want.parameter_map_id;
  if (same) {
    if (found.revision == want.revision &&
        found.weight_generation == want.weight_generation) {
      same = found.placement_id == want.placement_id;
    } else if (expect.placement_id_at) {
      RESHARD_ASSIGN_OR_RETURN(
          std::string at,
          expect.placement_id_at(found.revision, found.weight_generation));
      same = found.placement_id == at;
    } else {
      same = false;
    }
  }
  if (!same) {
    return Status::InvalidArgument(Printable(path) + " is the file of " +
                                   found.ToString() + ", not of " +
                                   want.ToString());
  }
  return Status::OK();
}

// Where each of `participant`'s parameters lies in its parameter file of
// header `header` (offsets from the file's start, in parameter order): the
// file must hold exactly those parameters, each with its shape and dtype.
Result<std::vector<uint64_t>> LocateParameters(
    const std::string& path, const SafetensorsHeader& header,
    const EngineParticipant& participant) {
  std::map<std::string_view, const SafetensorsTensor*> by_name;
  for (const SafetensorsTensor& t : header.tensors) by_name[t.name] = &t;
  std::vector<uint64_t> offsets;
  for (const EngineParameter& q : participant.parameters) {
    auto it = by_name.find(q.name);
    if (it == by_name.end()) {
      return Status::InvalidArgument(Printable(path) + " lacks parameter " +
                                     q.name + " of participant " +
                                     participant.participant_id);
    }
    const SafetensorsTensor& t = *it->second;
    const SafetensorsDtype* dt = FindSafetensorsDtype(t.dtype);
    if (t.shape != q.shape || dt == nullptr || dt->placement != q.dtype) {
      return Status::InvalidArgument(
          Printable(path) + ": parameter " + q.name + " is " +
          DimsText(t.shape) + " " + t.dtype + " in the file, but the " +
          "engine layout gives participant " + participant.participant_id +
          " a " + DimsText(q.shape) + " " + q.dtype + " parameter");
    }
    offsets.push_back(header.data_offset + t.begin);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return Status::InvalidArgument(
        Printable(path) + " holds " + std::string(by_name.begin()->first) +
        ", which is not a parameter of participant " +
        participant.participant_id + " in this engine layout");
  }
  return offsets;
}

// The header of a parameter file of `size` bytes; `read(offset, n)` gives
// the file's bytes [offset, offset + n).
template <typename Read>
Result<SafetensorsHeader> ReadParameterHeader(const std::string& path,
                                              uint64_t size, Read&& read) {
  if (size < 8) {
    return Status::InvalidArgument(Printable(path) +
                                   " is too short for a safetensors file");
  }
  RESHARD_ASSIGN_OR_RETURN(std::string first8, read(0, 8));
  RESHARD_ASSIGN_OR_RETURN(uint64_t n,
                           ParseSafetensorsPrefix(path, first8, size));
  RESHARD_ASSIGN_OR_RETURN(std::string json, read(8, n));
  return ParseSafetensorsHeader(path, json, size);
}

// ReadParameterFile on the open file `fd` of `size` bytes at `path`.
Status ReadParameterFd(int fd, uint64_t size, const std::string& path,
                       const EngineParticipant& participant,
                       const ParameterBuffers& buffers,
                       const ParameterFileExpectation& expect) {
  RESHARD_ASSIGN_OR_RETURN(
      SafetensorsHeader header,
      ReadParameterHeader(
          path, size, [&](uint64_t offset, uint64_t n) -> Result<std::string> {
            std::string out(n, '\0');
            RESHARD_RETURN_NOT_OK(
                internal::PreadAll(fd, out.data(), n, offset, path));
            return out;
          }));
  RESHARD_RETURN_NOT_OK(CheckIdentity(path, header, participant, expect));
  RESHARD_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                           LocateParameters(path, header, participant));
  for (size_t i = 0; i < participant.parameters.size(); ++i) {
    const EngineParameter& q = participant.parameters[i];
    auto b = buffers.find(q.name);
    if (b == buffers.end() || b->second.nbytes != q.nbytes()) {
      return Status::InvalidArgument("no buffer of its size for parameter " +
                                     q.name);
    }
    RESHARD_RETURN_NOT_OK(
        internal::PreadAll(fd, b->second.data, q.nbytes(), offsets[i], path));
  }
  return Status::OK();
}

}  // namespace

Status ReadParameterFile(const std::string& path,
                         const EngineParticipant& participant,
                         const ParameterBuffers& buffers,
                         const ParameterFileExpectation& expect) {
  uint64_t size = 0;
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor fd,
                           internal::OpenRegularFile(path, &size));
  return ReadParameterFd(fd.get(), size, path, participant, buffers, expect);
}

Result<ParameterMemory> ParameterMemory::MapFile(
    const std::string& path, const EngineParticipant& p,
    const ParameterFileExpectation& expect) {
  uint64_t size = 0;
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor fd,
                           internal::OpenRegularFile(path, &size));
  auto file = std::make_shared<internal::MappedFile>(
      internal::MappedFile::Map(fd.get(), size, /*copy_on_write=*/true));
  if (!file->mapped()) {  // empty, or the mapping refused: read the same file
    RESHARD_ASSIGN_OR_RETURN(ParameterMemory m, Allocate(p));
    RESHARD_RETURN_NOT_OK(
        ReadParameterFd(fd.get(), size, path, p, m.buffers(), expect));
    return m;
  }
  const std::string_view bytes = file->view();
  RESHARD_ASSIGN_OR_RETURN(
      SafetensorsHeader header,
      ReadParameterHeader(
          path, bytes.size(),
          [&](uint64_t offset, uint64_t n) -> Result<std::string> {
            return std::string(bytes.substr(offset, n));
          }));
  RESHARD_RETURN_NOT_OK(CheckIdentity(path, header, p, expect));
  RESHARD_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                           LocateParameters(path, header, p));
  ParameterMemory m;
  for (size_t i = 0; i < p.parameters.size(); ++i) {
    const EngineParameter& q = p.parameters[i];
    m.buffers_[q.name] = {file->data() + offsets[i], q.nbytes()};
    m.bytes_ += q.nbytes();
  }
  m.mapping_ = std::move(file);
  return m;
}

}  // namespace reshard
