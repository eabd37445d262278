// A checkpoint as a plan source: a stored-manifest view of its tensors and
// a read-only ObjectStore over its files, loaded by the store's ranged
// loader (store/ranged_load.h) without checksums.

#include <fcntl.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "hf/checkpoint_state.h"
#include "hf/write_plan_state.h"
#include "reshard/api.h"
#include "store/converting_load.h"
#include "store/ranged_load.h"
#include "util/dims_text.h"
#include "util/printable.h"

namespace reshard {
namespace internal {
namespace {

class CheckpointObjectStore final : public ObjectStore {
 public:
  explicit CheckpointObjectStore(std::shared_ptr<HfCheckpoint::State> s)
      : s_(std::move(s)), uri_("hf://" + s_->dir) {
    for (size_t i = 0; i < s_->files.size(); ++i) {
      index_.emplace(CheckpointObjectKey(s_->files[i].name), i);
    }
  }

  Status Put(std::string_view key, std::string_view) override {
    return ReadOnly(key);
  }
  Result<std::string> Get(std::string_view key) override {
    return Status::NotFound("a checkpoint has no records: " + Printable(key));
  }
  Result<std::vector<std::string>> List(std::string_view) override {
    return std::vector<std::string>{};
  }
  Status Delete(std::string_view key) override { return ReadOnly(key); }
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>&,
                   Durability) override {
    return ReadOnly(key);
  }
  Status Sync() override { return Status::OK(); }
  Result<uint64_t> RemoveStaleTemporaries(std::chrono::seconds) override {
    return uint64_t{0};
  }
  const std::string& uri() const override { return uri_; }

  Result<uint64_t> ObjectSize(std::string_view key) override {
    RESHARD_ASSIGN_OR_RETURN(size_t i, Find(key));
    return s_->files[i].size;
  }

  // Every range is checked against its file's size before any is read.
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    std::vector<size_t> files;
    files.reserve(ranges.size());
    for (const ReadRange& r : ranges) {
      RESHARD_ASSIGN_OR_RETURN(size_t i, Find(r.key));
      const uint64_t size = s_->files[i].size;
      if (r.offset + r.length < r.offset || r.offset + r.length > size) {
        return Status::OutOfRange(Printable(s_->files[i].name) + ": range [" +
                                  std::to_string(r.offset) + ", " +
                                  std::to_string(r.offset + r.length) +
                                  ") is past its end (" + std::to_string(size) +
                                  " bytes)");
      }
      files.push_back(i);
    }
    // Ranges that continue each other in one file are one preadv (one
    // large read instead of several), then the kernel is asked to read
    // ahead of the last byte while the loader copies.
    for (size_t k = 0; k < ranges.size();) {
      std::vector<ReadBuffer> buffers = {{ranges[k].dest, ranges[k].length}};
      size_t j = k + 1;
      for (; j < ranges.size() && RangeContinues(ranges[j - 1], ranges[j]) &&
             buffers.size() < kMaxBuffers;
           ++j) {
        buffers.push_back({ranges[j].dest, ranges[j].length});
      }
      const uint64_t end = ranges[j - 1].offset + ranges[j - 1].length;
      const int fd = s_->fds[files[k]].get();
      RESHARD_RETURN_NOT_OK(
          PreadvAll(fd, buffers, ranges[k].offset,
                    s_->dir + "/" + s_->files[files[k]].name));
      ReadAhead(files[k], fd, ranges[k].offset, end);
      k = j;
    }
    return Status::OK();
  }

 private:
  Status ReadOnly(std::string_view key) const {
    return Status::FailedPrecondition("a checkpoint source is read-only: " +
                                      Printable(key));
  }
  Result<size_t> Find(std::string_view key) const {
    auto it = index_.find(std::string(key));
    if (it == index_.end()) {
      return Status::NotFound("no checkpoint file for object " +
                              Printable(key));
    }
    return it->second;
  }

  // A read [begin, end) that continues the file's previous one (a load
  // streaming through it) asks for the bytes after `end` ahead of time;
  // scattered reads (one rank's share) ask for nothing.
  void ReadAhead(size_t file, int fd, uint64_t begin, uint64_t end) {
    // ObjectStore methods may be called from several threads at once.
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t& last = last_end_[file];
    const bool streaming = begin >= last && begin - last <= kStreamGapBytes;
    last = end;
    uint64_t& asked = asked_[file];
    if (!streaming || end + kReadAheadBytes / 2 <= asked) return;
    const uint64_t from = std::max(asked, end);
    ::posix_fadvise(fd, static_cast<off_t>(from),
                    static_cast<off_t>(end + kReadAheadBytes - from),
                    POSIX_FADV_WILLNEED);
    asked = end + kReadAheadBytes;
  }

  static constexpr size_t kMaxBuffers = 1024;
  static constexpr uint64_t kReadAheadBytes = uint64_t{64} << 20;
  static constexpr uint64_t kStreamGapBytes = uint64_t{1} << 20;
  std::shared_ptr<HfCheckpoint::State> s_;
  std::string uri_;
  std::unordered_map<std::string, size_t> index_;
  std::mutex mu_;                               // guards asked_ and last_end_
  std::unordered_map<size_t, uint64_t> asked_;  // readahead requested up to
  std::unordered_map<size_t, uint64_t> last_end_;  // end of the last read
};

}  // namespace

std::string CheckpointObjectKey(std::string_view file) {
  return std::string(kCheckpointGroup) + "/payload/" + std::string(file);
}

std::unique_ptr<ObjectStore> MakeCheckpointObjectStore(
    std::shared_ptr<HfCheckpoint::State> state) {
  return std::make_unique<CheckpointObjectStore>(std::move(state));
}

}  // namespace internal

Result<StoredWeightManifest> CheckpointSource(
    const HfCheckpoint& checkpoint, const WeightPlacementManifest& target) {
  StoredWeightManifestSpec spec;
  spec.namespace_ = "hf";
  spec.resource_id = target.resource_id();
  spec.revision = target.revision();
  spec.weight_generation = target.weight_generation();
  spec.group_id = std::string(internal::kCheckpointGroup);
  spec.manifest_key = spec.group_id + "/manifest";
  spec.created_at = "1970-01-01T00:00:00Z";
  const std::string& dir = checkpoint.directory();
  for (const TensorDescriptor& t : target.tensors()) {
    const CheckpointTensor* c = checkpoint.FindTensor(t.tensor_id());
    if (c == nullptr) {
      return Status::NotFound(
          "checkpoint " + internal::Printable(dir) + " has no tensor " +
          internal::Printable(t.tensor_id()) + " of the target placement");
    }
    if (c->shape != t.global_shape() || c->dtype != t.dtype() ||
        c->itemsize != t.itemsize()) {
      return Status::InvalidArgument(
          "tensor " + internal::Printable(t.tensor_id()) + " is " + c->dtype +
          " " + internal::DimsText(c->shape) + " in " +
          internal::Printable(c->file) + " but " + t.dtype() + " " +
          internal::DimsText(t.global_shape()) + " in the target placement");
    }
    RESHARD_ASSIGN_OR_RETURN(auto whole, internal::WholeTensorOf(t));
    spec.tensors.push_back(std::move(whole));
    StoredFragment f;
    f.stored_fragment_id = t.tensor_id();
    f.tensor_id = t.tensor_id();
    f.global_offset.assign(c->shape.size(), 0);
    f.local_shape = c->shape;
    f.object_key = internal::CheckpointObjectKey(c->file);
    f.object_offset = c->offset;
    f.nbytes = c->nbytes;
    spec.fragments.push_back(std::move(f));
  }
  return StoredWeightManifest::Make(std::move(spec));
}

namespace {

// The first target tensor whose dtype differs from the checkpoint's, or
// nullptr.
const TensorDescriptor* FirstDtypeDifference(
    const HfCheckpoint& checkpoint, const WeightPlacementManifest& target) {
  for (const TensorDescriptor& t : target.tensors()) {
    const CheckpointTensor* c = checkpoint.FindTensor(t.tensor_id());
    if (c != nullptr && c->dtype != t.dtype()) return &t;
  }
  return nullptr;
}

Status NeedsConvert(const HfCheckpoint& checkpoint, const TensorDescriptor& t) {
  return Status::InvalidArgument(
      "tensor " + t.tensor_id() + " is " +
      checkpoint.FindTensor(t.tensor_id())->dtype + " in the checkpoint but " +
      t.dtype() +
      " in the target placement: converting it needs "
      "CheckpointLoadOptions::convert (--convert, convert=True)");
}

}  // namespace

Status CheckCheckpointLoad(const HfCheckpoint& checkpoint,
                           const WeightPlacementManifest& target,
                           const CheckpointLoadOptions& options) {
  const TensorDescriptor* differs = FirstDtypeDifference(checkpoint, target);
  if (differs == nullptr) {
    return CheckpointSource(checkpoint, target).status();
  }
  if (!options.convert) return NeedsConvert(checkpoint, *differs);
  RESHARD_ASSIGN_OR_RETURN(
      auto conversion,
      ConversionPlan::Make(CheckpointTensorLookup(checkpoint), target,
                           ConversionOptions{options.fp8_block}));
  // What the load reads: the staging placement, every tensor in the
  // checkpoint's dtype.
  return CheckpointSource(checkpoint, conversion.staging()).status();
}

Result<LoadReport> LoadCheckpoint(
    const HfCheckpoint& checkpoint, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const CheckpointLoadOptions& options) {
  auto checked =
      CheckedBindings::Make(target, target_bindings, BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("target bindings");
  return LoadCheckpoint(checkpoint, target, *checked, options);
}

Result<LoadReport> LoadCheckpoint(const HfCheckpoint& checkpoint,
                                  const WeightPlacementManifest& target,
                                  const CheckedBindings& checked,
                                  const CheckpointLoadOptions& options) {
  RESHARD_RETURN_NOT_OK(
      checked.RequireFor(target).WithContext("target bindings"));
  const auto& target_bindings = checked.bindings();
  if (const TensorDescriptor* t = FirstDtypeDifference(checkpoint, target)) {
    if (!options.convert) return NeedsConvert(checkpoint, *t);
    RESHARD_ASSIGN_OR_RETURN(
        auto conversion,
        ConversionPlan::Make(CheckpointTensorLookup(checkpoint), target,
                             ConversionOptions{options.fp8_block}));
    CheckpointLoadOptions plain = options;
    plain.convert = false;
    return internal::LoadConverting(
        conversion, target_bindings, options.convert_staging_bytes,
        std::clamp(std::thread::hardware_concurrency(), 1u, 8u),
        [&](const WeightPlacementManifest& part,
            const CheckedBindings& bindings) {
          return LoadCheckpoint(checkpoint, part, bindings, plain);
        });
  }
  RESHARD_ASSIGN_OR_RETURN(auto manifest, CheckpointSource(checkpoint, target));
  auto store = internal::MakeCheckpointObjectStore(checkpoint.state());
  internal::RangedLoadOptions load;
  load.max_range_bytes = options.max_range_bytes;
  load.max_ranges_per_request = options.max_ranges_per_request;
  load.staging_bytes = options.staging_bytes;
  load.max_read_gap_bytes = options.max_read_gap_bytes;
  load.min_scatter_bytes = options.min_scatter_bytes;
  load.progress = options.progress;
  return internal::RangedLoad(*store, manifest, target, target_bindings, load);
}

SourceTensorLookup CheckpointTensorLookup(const HfCheckpoint& checkpoint) {
  return [checkpoint](std::string_view id) -> std::optional<SourceTensorInfo> {
    const CheckpointTensor* t = checkpoint.FindTensor(id);
    if (t == nullptr) return std::nullopt;
    return SourceTensorInfo{t->shape, t->dtype, t->dtype + ":row-major"};
  };
}

}  // namespace reshard
