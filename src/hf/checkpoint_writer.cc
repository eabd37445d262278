// Writing a checkpoint: files laid out first (CreateCheckpointFiles), then
// every participant's positional writes (WriteCheckpointFragments), then
// the final names and the index (FinishCheckpoint).

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "bind/strided_stream.h"
#include "hf/write_plan_state.h"
#include "store/progress.h"
#include "util/file_io.h"
#include "util/printable.h"

namespace reshard {
namespace {

using internal::FileDescriptor;
using internal::Printable;
using internal::StridedSide;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kPartial = ".partial";

Result<FileDescriptor> OpenDir(const std::string& dir) {
  FileDescriptor fd(
      ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return Status::InvalidArgument(Printable(dir) +
                                     " is not a directory (or is a link)");
    }
    return internal::ErrnoStatus("cannot open directory", dir);
  }
  return fd;
}

bool Exists(int dir, const std::string& name) {
  struct stat sb;
  return ::fstatat(dir, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

// A file of `size` bytes with blocks reserved where the filesystem can
// (so a full disk fails here, not mid-write), `header` at its start.
Status LayOut(int dir, const std::string& path, const std::string& name,
              const CheckpointWriteFile& f) {
  FileDescriptor fd(
      ::openat(dir, name.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return internal::ErrnoStatus("cannot create", path);
  if (::fallocate(fd.get(), 0, 0, static_cast<off_t>(f.size)) != 0 &&
      (errno != EOPNOTSUPP ||
       ::ftruncate(fd.get(), static_cast<off_t>(f.size)) != 0)) {
    return internal::ErrnoStatus("cannot lay out", path);
  }
  return internal::PwriteAll(fd.get(), f.header.data(), f.header.size(), 0,
                             path);
}

Status WriteIndex(int dir, const std::string& path, const std::string& json) {
  const std::string tmp = std::string(kIndexName) + kPartial;
  FileDescriptor fd(
      ::openat(dir, tmp.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return internal::ErrnoStatus("cannot create", path + tmp);
  RESHARD_RETURN_NOT_OK(
      internal::PwriteAll(fd.get(), json.data(), json.size(), 0, path + tmp));
  if (::fsync(fd.get()) != 0) {
    return internal::ErrnoStatus("cannot sync", path + tmp);
  }
  if (::renameat2(dir, tmp.c_str(), dir, kIndexName, RENAME_NOREPLACE) != 0) {
    return internal::ErrnoStatus("cannot publish", path + kIndexName);
  }
  return Status::OK();
}

// One region's rows as written: the file offset of its first row (target
// side offsets relative to it) and the source rows in bound memory.
struct WriteWork {
  uint64_t file_base = 0;
  StridedSide source;
  StridedSide target;  // base == nullptr: offsets only
  uint64_t rows = 0;
  uint64_t row = 0;
  uint64_t within = 0;
  uint64_t NextOffset() const {
    return file_base + internal::RowOffset(target, row) + within;
  }
};

// The writes of one file: contiguous regions straight from memory, the
// others gathered in windows of file bytes, each window's covered runs
// written once.
class FileWriter {
 public:
  FileWriter(int fd, std::string path, uint64_t staging,
             CheckpointWriteReport* report, internal::ProgressMeter* progress)
      : fd_(fd),
        path_(std::move(path)),
        span_(std::max<uint64_t>(staging, 1)),
        report_(report),
        progress_(progress) {}

  Status Direct(const WriteWork& w) {
    ++report_->writes;
    report_->bytes += w.source.total_bytes;
    progress_->Add(w.source.total_bytes);
    return internal::PwriteAll(fd_, w.source.base, w.source.total_bytes,
                               w.file_base, path_);
  }

  Status Sweep(std::vector<WriteWork>& work) {
    std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) {
      return a.file_base < b.file_base;
    });
    while (true) {
      uint64_t next = UINT64_MAX;
      for (const WriteWork& w : work) {
        if (w.row < w.rows) next = std::min(next, w.NextOffset());
      }
      if (next == UINT64_MAX) return Status::OK();
      const uint64_t begin = next;
      const uint64_t end = begin + span_;
      if (staging_.size() < span_) staging_.resize(span_);
      runs_.clear();
      for (WriteWork& w : work) Gather(w, begin, end);
      std::sort(runs_.begin(), runs_.end());
      for (size_t i = 0; i < runs_.size();) {
        uint64_t b = runs_[i].first, e = runs_[i].second;
        size_t j = i + 1;
        for (; j < runs_.size() && runs_[j].first == e; ++j) {
          e = runs_[j].second;
        }
        ++report_->writes;
        report_->bytes += e - b;
        progress_->Add(e - b);
        RESHARD_RETURN_NOT_OK(internal::PwriteAll(
            fd_, staging_.data() + (b - begin), e - b, b, path_));
        i = j;
      }
    }
  }

 private:
  // Copies the rows (or parts) of `w` whose file bytes fall in [begin,
  // end) into the window.
  void Gather(WriteWork& w, uint64_t begin, uint64_t end) {
    const uint64_t inner = w.target.inner_bytes;
    while (w.row < w.rows) {
      const uint64_t at = w.NextOffset();
      if (at < begin || at >= end) return;
      const uint64_t n = std::min(inner - w.within, end - at);
      std::memcpy(
          staging_.data() + (at - begin),
          w.source.base + internal::RowOffset(w.source, w.row) + w.within, n);
      runs_.emplace_back(at, at + n);
      w.within += n;
      if (w.within == inner) {
        w.within = 0;
        ++w.row;
      }
    }
  }

  int fd_;
  std::string path_;
  uint64_t span_;
  CheckpointWriteReport* report_;
  internal::ProgressMeter* progress_;
  std::vector<uint8_t> staging_;
  std::vector<std::pair<uint64_t, uint64_t>> runs_;
};

struct FileWork {
  std::vector<WriteWork> direct, staged;
};

// The plan's regions whose source fragment `bindings` bind, per file.
Result<std::vector<FileWork>> CollectWrites(
    const CheckpointWritePlan::State& s,
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  std::unordered_map<std::string_view, const RuntimeBindingFragment*> bound;
  for (const auto& b : bindings) {
    for (const auto& f : b.fragments()) {
      RESHARD_RETURN_NOT_OK(RequireMemoryKind(f, {MemoryKind::kHost},
                                              "checkpoint write", "source",
                                              b.participant_id()));
      bound[f.placement_fragment_id()] = &f;
    }
  }
  std::unordered_map<std::string_view, const CheckpointWriteTensor*> where;
  for (const auto& t : s.tensors) where[t.name] = &t;
  std::vector<FileWork> files(s.files.size());
  const LogicalTransferPlan& plan = *s.plan;
  for (const TransferRegion& r : plan.regions()) {
    const PlanFragment& sf = plan.source_fragments()[r.source_fragment];
    auto b = bound.find(sf.fragment_id);
    if (b == bound.end()) continue;  // another participant writes it
    const CheckpointWriteTensor& t = *where.at(plan.tensors()[r.tensor]);
    BoundRegion br;
    br.source_address = b->second->address() + r.source_base_offset;
    br.target_address = 0;
    br.inner_bytes = r.inner_bytes;
    br.loops = r.loops;
    br.bytes = r.bytes;
    WriteWork w;
    w.file_base = t.offset + r.target_base_offset;
    w.source = StridedSide::Source(br);
    w.target = StridedSide::Target(br);
    w.rows = r.inner_bytes == 0 ? 0 : r.bytes / r.inner_bytes;
    FileWork& fw = files[t.file];
    (w.source.contiguous() && w.target.contiguous() ? fw.direct : fw.staged)
        .push_back(std::move(w));
  }
  return files;
}

}  // namespace

Status CreateCheckpointFiles(const CheckpointWritePlan& plan,
                             const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return internal::ErrnoStatus("cannot create directory", dir);
  }
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDir(dir));
  std::vector<std::string> names = {kIndexName,
                                    std::string(kIndexName) + kPartial};
  for (const auto& f : plan.files()) {
    names.push_back(f.name);
    names.push_back(f.name + kPartial);
  }
  for (const std::string& n : names) {
    if (Exists(dfd.get(), n)) {
      return Status::AlreadyExists(Printable(dir + "/" + n) +
                                   " exists: refusing to overwrite a "
                                   "checkpoint");
    }
  }
  std::vector<std::string> made;
  for (const auto& f : plan.files()) {
    const std::string name = f.name + kPartial;
    Status st = LayOut(dfd.get(), dir + "/" + name, name, f);
    if (Exists(dfd.get(), name)) made.push_back(name);
    if (!st.ok()) {
      for (const std::string& m : made) ::unlinkat(dfd.get(), m.c_str(), 0);
      return st;
    }
  }
  return Status::OK();
}

namespace {

// The plan was made for `placement`.
Status CheckWritePlanFor(const CheckpointWritePlan& plan,
                         const WeightPlacementManifest& placement) {
  const CheckpointWritePlan::State& s = *plan.state();
  if (!s.plan || placement.placement_id() != s.source_placement_id) {
    return Status::InvalidArgument(
        "checkpoint write plan was made for placement " +
        s.source_placement_id + ", not " + placement.placement_id());
  }
  return Status::OK();
}

}  // namespace

Result<CheckpointWriteReport> WriteCheckpointFragments(
    const CheckpointWritePlan& plan, const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const std::string& dir, const CheckpointWriteOptions& options) {
  RESHARD_RETURN_NOT_OK(CheckWritePlanFor(plan, placement));
  auto checked =
      CheckedBindings::Make(placement, bindings, BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("source bindings");
  return WriteCheckpointFragments(plan, placement, *checked, dir, options);
}

Result<CheckpointWriteReport> WriteCheckpointFragments(
    const CheckpointWritePlan& plan, const WeightPlacementManifest& placement,
    const CheckedBindings& checked, const std::string& dir,
    const CheckpointWriteOptions& options) {
  RESHARD_RETURN_NOT_OK(CheckWritePlanFor(plan, placement));
  RESHARD_RETURN_NOT_OK(
      checked.RequireFor(placement).WithContext("source bindings"));
  const CheckpointWritePlan::State& s = *plan.state();
  const auto& bindings = checked.bindings();
  RESHARD_ASSIGN_OR_RETURN(auto files, CollectWrites(s, bindings));
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDir(dir));
  CheckpointWriteReport report;
  uint64_t total = 0;
  for (const FileWork& f : files) {
    for (const WriteWork& w : f.direct) total += w.source.total_bytes;
    for (const WriteWork& w : f.staged) total += w.source.total_bytes;
  }
  internal::ProgressMeter progress(options.progress, total);
  for (size_t k = 0; k < files.size(); ++k) {
    if (files[k].direct.empty() && files[k].staged.empty()) continue;
    const std::string name = s.files[k].name + kPartial;
    const std::string path = dir + "/" + name;
    FileDescriptor fd(
        ::openat(dfd.get(), name.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return internal::ErrnoStatus("cannot open", path);
    FileWriter writer(fd.get(), path, options.staging_bytes, &report,
                      &progress);
    for (const WriteWork& w : files[k].direct) {
      RESHARD_RETURN_NOT_OK(writer.Direct(w));
    }
    RESHARD_RETURN_NOT_OK(writer.Sweep(files[k].staged));
  }
  progress.Finish();
  return report;
}

Status FinishCheckpoint(const CheckpointWritePlan& plan,
                        const std::string& dir) {
  RESHARD_ASSIGN_OR_RETURN(FileDescriptor dfd, OpenDir(dir));
  for (const auto& f : plan.files()) {
    const std::string partial = f.name + kPartial;
    const std::string path = dir + "/" + partial;
    FileDescriptor fd(::openat(dfd.get(), partial.c_str(),
                               O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return internal::ErrnoStatus("cannot open", path);
    struct stat sb;
    if (::fstat(fd.get(), &sb) != 0 ||
        static_cast<uint64_t>(sb.st_size) != f.size) {
      return Status::DataLoss(Printable(path) + " is not " +
                              std::to_string(f.size) + " bytes");
    }
    if (::fsync(fd.get()) != 0)
      return internal::ErrnoStatus("cannot sync", path);
    if (::renameat2(dfd.get(), partial.c_str(), dfd.get(), f.name.c_str(),
                    RENAME_NOREPLACE) != 0) {
      return internal::ErrnoStatus("cannot publish", dir + "/" + f.name);
    }
  }
  RESHARD_RETURN_NOT_OK(WriteIndex(dfd.get(), dir + "/", plan.index_json()));
  if (::fsync(dfd.get()) != 0) {
    return internal::ErrnoStatus("cannot sync directory", dir);
  }
  return Status::OK();
}

}  // namespace reshard
