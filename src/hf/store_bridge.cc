// Checkpoints to weight-store revisions and back, never holding a whole
// tensor in memory: imports cut tensors into slabs of at most
// max_fragment_bytes (each read from its file straight into one buffer,
// checksummed and stored); exports stream each stored fragment through the
// loader's staging window into positional writes of the output files.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <unordered_map>

#include "hf/checkpoint_state.h"
#include "hf/write_plan_state.h"
#include "reshard/weight_store.h"
#include "store/keys.h"
#include "store/lease.h"
#include "store/ranged_load.h"
#include "store/revision_files.h"
#include "util/file_io.h"
#include "util/printable.h"

namespace reshard {
namespace {

using internal::FileDescriptor;

// Row-major slabs of `shape`: boxes of at most `max_bytes` (one element
// row at least) that are each contiguous in the tensor.
std::vector<std::pair<Dims, Dims>> Slabs(const Dims& shape, int64_t itemsize,
                                         uint64_t max_bytes) {
  if (shape.empty()) return {{{}, {}}};
  // The outermost dimension k whose rows (one index of k, everything
  // inside it) fit.
  uint64_t row = static_cast<uint64_t>(itemsize);
  for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  size_t k = 0;
  while (k + 1 < shape.size() && row > max_bytes) row /= shape[++k];
  const int64_t per = static_cast<int64_t>(
      std::max<uint64_t>(1, max_bytes / std::max<uint64_t>(row, 1)));
  std::vector<std::pair<Dims, Dims>> out;
  Dims at(shape.size(), 0);  // the index over the dimensions before k
  while (true) {
    for (int64_t b = 0; b < shape[k]; b += per) {
      Dims offset = at, extent = shape;
      for (size_t d = 0; d < k; ++d) extent[d] = 1;
      offset[k] = b;
      extent[k] = std::min(per, shape[k] - b);
      out.emplace_back(offset, extent);
    }
    size_t d = k;
    while (d > 0 && ++at[d - 1] == shape[d - 1]) at[--d] = 0;
    if (d == 0) return out;
  }
}

// Byte offset of a box's first element in its row-major tensor.
uint64_t LinearOffset(const Dims& shape, const Dims& offset, int64_t itemsize) {
  uint64_t at = 0;
  for (size_t d = 0; d < shape.size(); ++d) at = at * shape[d] + offset[d];
  return at * static_cast<uint64_t>(itemsize);
}

// The checkpoint under the layout's descriptors, each tensor cut in slabs,
// all held by the layout's one participant.
Result<WeightPlacementManifest> SlabPlacement(
    const WeightPlacementManifest& whole, uint64_t max_bytes) {
  std::vector<PlacementFragment> fragments;
  for (const TensorDescriptor& t : whole.tensors()) {
    for (const auto& [offset, extent] :
         Slabs(t.global_shape(), t.itemsize(), max_bytes)) {
      PlacementFragmentSpec f;
      f.tensor_id = t.tensor_id();
      f.global_offset = offset;
      f.local_shape = extent;
      f.nbytes = static_cast<uint64_t>(t.itemsize());
      for (int64_t e : extent) f.nbytes *= static_cast<uint64_t>(e);
      f.rank = whole.topology().participants().front().rank;
      RESHARD_ASSIGN_OR_RETURN(auto pf, PlacementFragment::Make(std::move(f)));
      fragments.push_back(std::move(pf));
    }
  }
  return WeightPlacementManifest::FromFragments(
      whole.header(), whole.topology(), whole.tensors(), std::move(fragments));
}

class CheckpointReader final : public FragmentReader {
 public:
  CheckpointReader(const HfCheckpoint& c, const WeightPlacementManifest& p)
      : ckpt_(c),
        p_(p),
        store_(internal::MakeCheckpointObjectStore(c.state())) {}

  Status Read(const PlacementFragment& f, void* dest) override {
    const CheckpointTensor* t = ckpt_.FindTensor(f.tensor_id());
    const TensorDescriptor* d = p_.FindTensor(f.tensor_id());
    if (t == nullptr || d == nullptr) {
      return Status::NotFound("no checkpoint tensor " +
                              internal::Printable(f.tensor_id()));
    }
    const uint64_t at =
        t->offset + LinearOffset(t->shape, f.global_offset(), t->itemsize);
    bytes_read_ += f.nbytes();
    return store_->ReadRanges(
        {{internal::CheckpointObjectKey(t->file), at, f.nbytes(), dest}});
  }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  const HfCheckpoint& ckpt_;
  const WeightPlacementManifest& p_;
  std::unique_ptr<ObjectStore> store_;
  uint64_t bytes_read_ = 0;
};

// Positional writes into the partial files of a write plan; positions are
// offsets into the files laid end to end.
class FileSink final : public internal::RangedSink {
 public:
  static Result<FileSink> Open(const CheckpointWritePlan& plan,
                               const std::string& dir) {
    FileSink s;
    uint64_t base = 0;
    for (const auto& f : plan.files()) {
      const std::string path = dir + "/" + f.name + ".partial";
      FileDescriptor fd(
          ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd.valid()) return internal::ErrnoStatus("cannot open", path);
      s.files_.push_back({base, path, std::move(fd)});
      base += f.size;
    }
    return s;
  }
  uint64_t Base(size_t file) const { return files_[file].base; }

  Status Write(uint64_t position, const uint8_t* data, uint64_t n) override {
    auto it =
        std::upper_bound(files_.begin(), files_.end(), position,
                         [](uint64_t p, const File& f) { return p < f.base; });
    const File& f = *(it - 1);
    ++writes_;
    bytes_ += n;
    return internal::PwriteAll(f.fd.get(), data, n, position - f.base, f.path);
  }
  uint64_t writes() const { return writes_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct File {
    uint64_t base;
    std::string path;
    FileDescriptor fd;
  };
  std::vector<File> files_;
  uint64_t writes_ = 0, bytes_ = 0;
};

Status CheckCommitted(WeightStore& store, const StoredWeightManifest& m) {
  auto committed = store.ReadManifest(m.manifest_key());
  if (!committed.ok() || committed->manifest_digest() != m.manifest_digest()) {
    return Status::FailedPrecondition("weight manifest is not committed: " +
                                      m.manifest_key());
  }
  return Status::OK();
}

}  // namespace

// ---------------------------------------------------------------- side files

namespace {

// What transformers' save_pretrained and tokenizers write beside the
// weights that from_pretrained reads (docs/hf-checkpoints.md, "Side
// files"). Weights, their index and code (`*.py`) are never side files.
constexpr std::array<std::string_view, 16> kSideFileNames = {
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "config.json",
    "generation_config.json",
    "merges.txt",
    "preprocessor_config.json",
    "processor_config.json",
    "sentencepiece.bpe.model",
    "special_tokens_map.json",
    "spiece.model",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt"};

constexpr const char* kPartialSuffix = ".partial";

Result<FileDescriptor> OpenDirectory(const std::string& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return internal::ErrnoStatus("cannot open directory", dir);
  return fd;
}

// The side-file names among `dir`'s entries, sorted.
Result<std::vector<std::string>> SideFileNamesIn(const std::string& dir) {
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDirectory(dir));
  DIR* d = ::fdopendir(::dup(dfd.get()));
  if (d == nullptr) return internal::ErrnoStatus("cannot list", dir);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    if (IsHfSideFileName(e->d_name)) names.emplace_back(e->d_name);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) {
    errno = err;
    return internal::ErrnoStatus("cannot list", dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool EntryExists(int dir, const std::string& name) {
  struct stat sb;
  return ::fstatat(dir, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

// `f` as "<name>.partial", durable, then linked to its name (never
// replacing anything) and the partial name removed.
Status WriteOneSideFile(int dfd, const std::string& dir, const HfSideFile& f) {
  const std::string partial = f.name + kPartialSuffix;
  const std::string path = dir + "/" + partial;
  FileDescriptor fd(
      ::openat(dfd, partial.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return internal::ErrnoStatus("cannot create", path);
  Status st =
      internal::PwriteAll(fd.get(), f.bytes.data(), f.bytes.size(), 0, path);
  if (st.ok() && ::fsync(fd.get()) != 0) {
    st = internal::ErrnoStatus("cannot sync", path);
  }
  if (st.ok() && ::linkat(dfd, partial.c_str(), dfd, f.name.c_str(), 0) != 0) {
    st = internal::ErrnoStatus("cannot name", dir + "/" + f.name);
  }
  ::unlinkat(dfd, partial.c_str(), 0);
  return st;
}

void RemoveSideFiles(const std::vector<HfSideFile>& files,
                     const std::string& dir) {
  for (const HfSideFile& f : files) ::unlink((dir + "/" + f.name).c_str());
}

}  // namespace

bool IsHfSideFileName(std::string_view name) {
  if (!internal::CheckRevisionFileName(name).ok()) return false;
  if (std::find(kSideFileNames.begin(), kSideFileNames.end(), name) !=
      kSideFileNames.end()) {
    return true;
  }
  return name.size() > 9 && name.ends_with(".tiktoken");
}

Status CheckHfSideFilesAbsent(const std::vector<HfSideFile>& files,
                              const std::string& dir) {
  FileDescriptor dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) {
    if (errno == ENOENT) return Status::OK();
    return internal::ErrnoStatus("cannot open directory", dir);
  }
  for (const HfSideFile& f : files) {
    for (const std::string& entry : {f.name, f.name + kPartialSuffix}) {
      if (EntryExists(dfd.get(), entry)) {
        return Status::AlreadyExists(internal::Printable(dir + "/" + entry) +
                                     " exists: refusing to overwrite a "
                                     "checkpoint's side file");
      }
    }
  }
  return Status::OK();
}

Result<std::vector<HfSideFile>> ReadHfSideFiles(const std::string& dir) {
  RESHARD_ASSIGN_OR_RETURN(auto names, SideFileNamesIn(dir));
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDirectory(dir));
  std::vector<HfSideFile> files;
  uint64_t total = 0;
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    uint64_t size = 0;
    // Links are followed, as for the weights (the Hugging Face cache links
    // snapshots to blobs); whatever is not a regular file is refused
    // without blocking.
    RESHARD_ASSIGN_OR_RETURN(
        FileDescriptor fd,
        internal::OpenRegularFileAt(dfd.get(), name, path, &size));
    total += size;
    if (size > internal::kMaxRevisionFileBytes ||
        total > internal::kMaxRevisionFilesBytes) {
      return Status::InvalidArgument(
          "side file " + internal::Printable(path) + " holds " +
          std::to_string(size) + " bytes; side files hold at most " +
          std::to_string(internal::kMaxRevisionFileBytes) + " bytes each and " +
          std::to_string(internal::kMaxRevisionFilesBytes) + " together");
    }
    RESHARD_ASSIGN_OR_RETURN(
        std::string bytes,
        internal::ReadFdBounded(fd.get(), internal::kMaxRevisionFileBytes, path,
                                "a side file"));
    files.push_back({name, std::move(bytes)});
  }
  if (files.size() > internal::kMaxRevisionFiles) {
    return Status::InvalidArgument(internal::Printable(dir) + " holds " +
                                   std::to_string(files.size()) +
                                   " side files, more than " +
                                   std::to_string(internal::kMaxRevisionFiles));
  }
  return files;
}

Status WriteHfSideFiles(const std::vector<HfSideFile>& files,
                        const std::string& dir) {
  for (const HfSideFile& f : files) {
    if (!IsHfSideFileName(f.name)) {
      return Status::InvalidArgument(internal::Printable(f.name) +
                                     " is not a side file name");
    }
  }
  RESHARD_RETURN_NOT_OK(CheckHfSideFilesAbsent(files, dir));
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDirectory(dir));
  for (size_t i = 0; i < files.size(); ++i) {
    Status st = WriteOneSideFile(dfd.get(), dir, files[i]);
    if (!st.ok()) {
      RemoveSideFiles({files.begin(), files.begin() + i}, dir);
      return st;
    }
  }
  if (::fsync(dfd.get()) != 0) {
    RemoveSideFiles(files, dir);
    return internal::ErrnoStatus("cannot sync", dir);
  }
  return Status::OK();
}

// ---------------------------------------------------------------- import

Result<HfImportReport> ImportCheckpoint(const HfCheckpoint& checkpoint,
                                        std::string_view config_json,
                                        WeightStore& store,
                                        const HfImportOptions& options) {
  HfLayoutOptions layout;
  layout.resource_id = options.resource_id;
  layout.revision = options.revision;
  layout.weight_generation = options.weight_generation;
  RESHARD_ASSIGN_OR_RETURN(auto whole,
                           HfLayout(config_json, layout, &checkpoint));
  RESHARD_ASSIGN_OR_RETURN(
      auto source,
      SlabPlacement(whole, std::max<uint64_t>(options.max_fragment_bytes, 1)));
  // Side files are read (and refused) before anything is written.
  RESHARD_ASSIGN_OR_RETURN(std::vector<HfSideFile> side,
                           ReadHfSideFiles(checkpoint.directory()));
  std::vector<internal::RevisionFile> files;
  for (HfSideFile& f : side) {
    files.push_back({std::move(f.name), std::move(f.bytes)});
  }
  RESHARD_ASSIGN_OR_RETURN(auto plan, store.PrepareImport(source));
  CheckpointReader reader(checkpoint, source);
  WeightStoreOptions with_progress = store.options();
  with_progress.progress = options.progress;
  // The side files belong to the upload's transaction: committed,
  // verified, collected and removed with it (store/revision_files.h).
  Status st = internal::WriteRevisionFiles(
      store.backend(), internal::RevisionKeys(plan.manifest().group_id()),
      plan.transaction_id(), files, store.options().chunk_bytes);
  if (st.ok()) {
    auto receipts = store.WithOptions(std::move(with_progress))
                        .Import(plan, source, reader);
    st = receipts.ok() ? store.Commit(plan, *receipts) : receipts.status();
  }
  if (!st.ok()) {
    (void)store.Abort(plan);
    return st;
  }
  HfImportReport r;
  r.manifest_key = plan.manifest().manifest_key();
  r.fragments = plan.manifest().fragments().size();
  r.tensors = plan.manifest().tensors().size();
  r.bytes_read = reader.bytes_read();
  r.side_files = files.size();
  return r;
}

namespace {

// The revision's side files, each verified against its checksums; a
// stored name that is no side file name is DataLoss (the export writes
// nothing else).
Result<std::vector<HfSideFile>> ReadStoredSideFiles(
    WeightStore& store, const StoredWeightManifest& m, uint64_t* chunks) {
  std::vector<HfSideFile> side;
  RESHARD_RETURN_NOT_OK(internal::ForEachRevisionFile(
      store.backend(), m,
      [&](const internal::RevisionFileEntry& f, std::string_view bytes) {
        if (!IsHfSideFileName(f.name)) {
          return Status::DataLoss("revision file " + f.name + " of " +
                                  m.manifest_key() +
                                  " is not a checkpoint side file");
        }
        side.push_back({f.name, std::string(bytes)});
        return Status::OK();
      },
      chunks));
  return side;
}

// The revision's bytes into the created files of `plan` in `dir`, then
// its side files, then the files finished.
Result<HfExportReport> WriteExport(WeightStore& store,
                                   const StoredWeightManifest& manifest,
                                   const internal::RevisionKeys& keys,
                                   const CheckpointWritePlan& plan,
                                   const std::vector<HfSideFile>& side,
                                   const std::string& dir,
                                   const CheckpointWriteOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(FileSink sink, FileSink::Open(plan, dir));
  std::unordered_map<std::string_view, const CheckpointWriteTensor*> where;
  for (const auto& t : plan.tensors()) where[t.name] = &t;
  const LogicalTransferPlan& lp = *plan.state()->plan;
  internal::RangedLoadOptions load;
  load.staging_bytes = options.staging_bytes;
  load.max_range_bytes = std::min(load.max_range_bytes, options.staging_bytes);
  load.chunk_sums = [&](const StoredFragment& f) {
    return internal::ReadChunkSums(store.backend(), keys, f);
  };
  load.progress = options.progress;
  RESHARD_ASSIGN_OR_RETURN(
      LoadReport loaded,
      internal::RangedLoadToSink(
          store.backend(), manifest, lp,
          [&](const TransferRegion& r) {
            const CheckpointWriteTensor& t = *where.at(lp.tensors()[r.tensor]);
            return sink.Base(t.file) + t.offset + r.target_base_offset;
          },
          sink, load));
  RESHARD_RETURN_NOT_OK(WriteHfSideFiles(side, dir));
  Status finished = FinishCheckpoint(plan, dir);
  if (!finished.ok()) {
    RemoveSideFiles(side, dir);
    return finished;
  }
  HfExportReport r;
  r.side_files = side.size();
  r.bytes = sink.bytes();
  r.bytes_read = loaded.bytes_read;
  r.writes = sink.writes();
  r.files = plan.files().size();
  r.chunks_verified = loaded.chunks_verified;
  return r;
}

}  // namespace

Result<HfExportReport> ExportCheckpoint(WeightStore& store,
                                        const StoredWeightManifest& manifest,
                                        const std::string& dir,
                                        const CheckpointWriteOptions& options) {
  const internal::RevisionKeys keys(manifest.group_id());
  RESHARD_ASSIGN_OR_RETURN(
      internal::Lease lease,
      internal::Lease::Take(store.backend(), keys, store.options()));
  RESHARD_RETURN_NOT_OK(CheckCommitted(store, manifest));
  // Side files are read and verified, and refused if present in `dir`,
  // before anything is written.
  uint64_t side_chunks = 0;
  RESHARD_ASSIGN_OR_RETURN(auto side,
                           ReadStoredSideFiles(store, manifest, &side_chunks));
  RESHARD_RETURN_NOT_OK(CheckHfSideFilesAbsent(side, dir));
  PlacementHeader header{manifest.resource_id(), manifest.revision(),
                         manifest.weight_generation(), "hf-checkpoint"};
  RESHARD_ASSIGN_OR_RETURN(
      auto s, internal::PlanCheckpointFiles(manifest.tensors(),
                                            std::move(header), options));
  RESHARD_ASSIGN_OR_RETURN(auto logical, LogicalTransferPlan::MakeFromStored(
                                             manifest, s->checkpoint));
  s->plan = std::move(logical);
  const CheckpointWritePlan plan(s);
  struct stat before;
  const bool dir_existed = ::stat(dir.c_str(), &before) == 0;
  RESHARD_RETURN_NOT_OK(CreateCheckpointFiles(plan, dir));
  // A failed export (a missing or corrupt stored fragment, a full disk)
  // leaves nothing behind: its partial files, and the directory if it
  // made it.
  auto written = WriteExport(store, manifest, keys, plan, side, dir, options);
  if (written.ok()) written->chunks_verified += side_chunks;
  if (!written.ok()) {
    for (const CheckpointWriteFile& f : plan.files()) {
      ::unlink((dir + "/" + f.name + ".partial").c_str());
    }
    if (!dir_existed) ::rmdir(dir.c_str());
  }
  return written;
}

}  // namespace reshard
