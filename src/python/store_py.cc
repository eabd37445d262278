// The store path (weight_store.h): upload a placement's buffers as an
// immutable revision, load a revision into any target layout, and the
// maintenance commands (ls, verify, rm, gc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "reshard/backends/redis_store.h"
#include "reshard/reshard.h"
#include "reshard/weight_store.h"
#include "src/python/buffers.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/progress.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

// A weight store, shared so that Python copies alias it. Opening never
// creates a store directory: while the directory of an fs:// store does not
// exist, reads (load, wait, ls, verify, ...) fail NotFound "store directory
// PATH does not exist" at once, and the first write (an upload) creates it.
class PyWeightStore {
 public:
  PyWeightStore(std::string uri, WeightStoreOptions options)
      : state_(std::make_shared<State>()) {
    state_->uri = std::move(uri);
    state_->options = std::move(options);
    // Open it now if it exists (and so check the URI and options now).
    auto backend = OpenObjectStore(state_->uri, {.create_if_missing = false});
    if (backend.ok()) {
      state_->store.emplace(Unwrap(WeightStore::Open(
          std::shared_ptr<ObjectStore>(std::move(backend).value()),
          state_->options)));
    } else if (backend.status().code() != StatusCode::kNotFound) {
      ThrowIfError(backend.status());
    } else {
      // The options are checked now all the same (no backend is touched).
      ThrowIfError(
          WeightStore::Open(std::shared_ptr<ObjectStore>(), state_->options)
              .status());
    }
  }
  // The store of a read: NotFound while its directory does not exist.
  WeightStore& get() const { return Get(/*write=*/false); }
  // The store of a write, its directory created if missing.
  WeightStore& get_for_write() const { return Get(/*write=*/true); }

 private:
  struct State {
    std::mutex mu;
    std::string uri;
    WeightStoreOptions options;
    std::optional<WeightStore> store;
  };
  WeightStore& Get(bool write) const {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->store) {
      auto backend = OpenObjectStore(state_->uri, {.create_if_missing = write});
      ThrowIfError(backend.status());
      state_->store.emplace(Unwrap(WeightStore::Open(
          std::shared_ptr<ObjectStore>(std::move(backend).value()),
          state_->options)));
    }
    return *state_->store;
  }
  std::shared_ptr<State> state_;
};

PyWeightStore Open(py::object uri, py::object key_prefix, py::object ns,
                   py::object chunk_bytes, py::object lease_ttl_seconds,
                   py::object gc_grace_seconds) {
  WeightStoreOptions o;
  o.key_prefix = ToStr(key_prefix, "WeightStore.key_prefix");
  o.namespace_ = ToStr(ns, "WeightStore.namespace");
  o.chunk_bytes = ToU64(chunk_bytes, "WeightStore.chunk_bytes");
  o.lease_ttl = std::chrono::seconds(
      ToI64(lease_ttl_seconds, "WeightStore.lease_ttl_seconds"));
  o.gc_grace = std::chrono::seconds(
      ToI64(gc_grace_seconds, "WeightStore.gc_grace_seconds"));
  return PyWeightStore(ToStr(uri, "WeightStore.uri"), std::move(o));
}

// Writes every binding's fragments (one Upload: one progress over all of
// them) and commits.
Status UploadAll(WeightStore& store, const UploadPlan& plan,
                 const WeightPlacementManifest& placement,
                 const CheckedBindings& bindings,
                 const ProgressCallback& progress) {
  WeightStoreOptions o = store.options();
  if (progress) o.progress = progress;
  WeightStore reporting = store.WithOptions(std::move(o));
  RESHARD_ASSIGN_OR_RETURN(auto receipts,
                           reporting.Upload(plan, placement, bindings));
  return store.Commit(plan, receipts);
}

// With `quantize_to` (a placement holding some of `placement`'s tensors in
// block FP8), the source quantization whose placement and bindings are
// uploaded instead: an FP8 revision from float tensors (SourceQuantization).
std::optional<SourceQuantization> QuantizeForUpload(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    py::object quantize_to, py::object fp8_block) {
  if (quantize_to.is_none()) return std::nullopt;
  const auto& form = quantize_to.cast<const WeightPlacementManifest&>();
  ConversionOptions o;
  o.block = ToFp8Block(fp8_block, "upload.fp8_block");
  py::gil_scoped_release release;
  auto q = Unwrap(SourceQuantization::Make(placement, form, bindings, o));
  ThrowIfError(q.CheckQuantizesAll(form));
  if (!q.quantizes()) {
    ThrowIfError(Status::InvalidArgument(
        "upload quantize_to: no tensor of the placement is held in block "
        "FP8 there (float8_e4m3fn with its weight_scale_inv)"));
  }
  ThrowIfError(q.Quantize(std::max(1u, std::thread::hardware_concurrency())));
  return q;
}

// Binds, prepares, writes every participant's fragments and commits; an
// error after prepare aborts the transaction so nothing half-written is
// ever published.
StoredWeightManifest Upload(const PyWeightStore& s,
                            const WeightPlacementManifest& source,
                            py::dict buffers, py::object options,
                            py::object progress_fn, py::object quantize_to,
                            py::object fp8_block) {
  // Each binding is checked once: the caller's here, the quantized ones
  // (bindings of another placement) once made.
  const CheckedBindings given =
      BindCheckedParticipants(source, buffers, BindingOptionsOf(options),
                              "upload source", "source bindings");
  const auto q =
      QuantizeForUpload(source, given.bindings(), quantize_to, fp8_block);
  const WeightPlacementManifest& placement = q ? q->placement() : source;
  const CheckedBindings bindings =
      q ? Unwrap(CheckedBindings::Make(placement, q->bindings(),
                                       BindingCoverage::kSubset))
        : given;
  PyProgress progress(std::move(progress_fn));
  std::optional<UploadPlan> plan;
  Status st;
  {
    py::gil_scoped_release release;
    WeightStore& store = s.get_for_write();
    plan = Unwrap(store.PrepareUpload(placement, bindings));
    st = UploadAll(store, *plan, placement, bindings, progress.Callback());
    if (!st.ok()) (void)store.Abort(*plan);
  }
  if (!st.ok()) throw StatusError(st);
  progress.Rethrow();
  return plan->manifest();
}

constexpr int64_t kMaxShareTimeoutMs = int64_t{7} * 86400 * 1000;

// One process's share of an upload spread over processes
// (WeightStore::UploadShare): binds this process's buffers, then meets the
// other processes in the store.
StoredWeightManifest UploadShare(const PyWeightStore& s,
                                 const WeightPlacementManifest& source,
                                 py::dict buffers, py::object upload_id,
                                 py::object rank, py::object ranks,
                                 py::object timeout_ms, py::object options,
                                 py::object quantize_to, py::object fp8_block) {
  // Checked first. NaN and infinities cannot reach here (an integer); a
  // negative or overflowing deadline is refused (a week at most, as a live
  // session's).
  const int64_t ms = ToI64(timeout_ms, "timeout_ms");
  if (ms < 0 || ms > kMaxShareTimeoutMs) {
    ThrowInvalid("timeout_ms", "must be between 0 and " +
                                   std::to_string(kMaxShareTimeoutMs) +
                                   " milliseconds, not " + std::to_string(ms));
  }
  // Each binding is checked once: the caller's here, the quantized ones
  // (bindings of another placement) by UploadShare.
  const CheckedBindings given =
      BindCheckedParticipants(source, buffers, BindingOptionsOf(options),
                              "upload source", "source bindings");
  const auto q =
      QuantizeForUpload(source, given.bindings(), quantize_to, fp8_block);
  ShareUploadOptions o;
  o.upload_id = ToStr(upload_id, "upload_id");
  o.rank = static_cast<int>(ToI64(rank, "rank"));
  o.ranks = static_cast<int>(ToI64(ranks, "ranks"));
  o.timeout = std::chrono::milliseconds(ms);
  py::gil_scoped_release release;
  return Unwrap(
      q ? s.get_for_write().UploadShare(q->placement(), q->bindings(), o)
        : s.get_for_write().UploadShare(source, given, o));
}

py::dict Load(const PyWeightStore& s, py::object manifest,
              const WeightPlacementManifest& target, py::dict buffers,
              py::object options, py::object progress_fn, bool convert,
              py::object fp8_block) {
  const CheckedBindings bindings =
      BindCheckedParticipants(target, buffers, BindingOptionsOf(options),
                              "load target", "target bindings");
  std::optional<StoredWeightManifest> m;
  if (py::isinstance<StoredWeightManifest>(manifest)) {
    m = manifest.cast<StoredWeightManifest>();
  }
  const std::string key = m ? "" : ToStr(manifest, "manifest_key");
  PyProgress progress(std::move(progress_fn));
  WeightStoreOptions o = s.get().options();
  o.progress = progress.Callback();
  o.convert = convert;
  o.fp8_block = ToFp8Block(fp8_block, "WeightStore.load.fp8_block");
  LoadReport r;
  {
    py::gil_scoped_release release;
    if (!m) m = Unwrap(s.get().ReadManifest(key));
    r = Unwrap(s.get().WithOptions(std::move(o)).Load(*m, target, bindings));
  }
  progress.Rethrow();
  return DictOf(r);
}

py::list List(const PyWeightStore& s) {
  std::vector<RevisionInfo> infos;
  {
    py::gil_scoped_release release;
    infos = Unwrap(s.get().List());
  }
  py::list out;
  for (const RevisionInfo& i : infos) out.append(DictOf(i));
  return out;
}

void RegisterMaintenance(py::class_<PyWeightStore>& c) {
  c.def("ls", &List, "Every revision with its state (COMMITTED, CORRUPT, ...).")
      .def(
          "manifest_keys",
          [](const PyWeightStore& s, py::object resource) {
            const std::string r = ToStr(resource, "resource_id");
            py::gil_scoped_release release;
            return Unwrap(s.get().ManifestKeys(r));
          },
          py::arg("resource_id"),
          "The manifest keys of a resource's published revisions, sorted.")
      .def(
          "read_manifest",
          [](const PyWeightStore& s, py::object key) {
            const std::string k = ToStr(key, "manifest_key");
            py::gil_scoped_release release;
            return Unwrap(s.get().ReadManifest(k));
          },
          py::arg("manifest_key"))
      .def(
          "verify",
          [](const PyWeightStore& s, py::object key) {
            const std::string k = ToStr(key, "manifest_key");
            VerifyReport r;
            {
              py::gil_scoped_release release;
              r = Unwrap(s.get().Verify(k));
            }
            return DictOf(r);
          },
          py::arg("manifest_key"), "Re-reads every byte against checksums.")
      .def(
          "rm",
          [](const PyWeightStore& s, py::object key) {
            const std::string k = ToStr(key, "manifest_key");
            py::gil_scoped_release release;
            ThrowIfError(s.get().Remove(k));
          },
          py::arg("manifest_key"), "Removes a revision (refused while leased).")
      .def(
          "gc",
          [](const PyWeightStore& s) {
            GcReport r;
            {
              py::gil_scoped_release release;
              r = Unwrap(s.get().Gc());
            }
            return DictOf(r);
          },
          "Removes abandoned uploads older than the grace period.");
}

}  // namespace

void RegisterStore(py::module_& m) {
  py::class_<PyWeightStore> c(m, "WeightStore",
                              "A weight store opened from a URI (fs://DIR).");
  c.def(py::init(&Open), py::arg("uri"), py::kw_only(),
        py::arg("key_prefix") = "weights", py::arg("namespace") = "default",
        py::arg("chunk_bytes") = uint64_t{1} << 20,
        py::arg("lease_ttl_seconds") = 86400,
        py::arg("gc_grace_seconds") = 3600)
      .def("upload_buffers", &Upload, py::arg("placement"), py::arg("buffers"),
           py::arg("options") = py::none(), py::arg("progress") = py::none(),
           py::arg("quantize_to") = py::none(),
           py::arg("fp8_block") = py::none(),
           "Uploads {participant: {fragment: address}} and commits; returns "
           "the committed manifest.")
      .def("upload_share_buffers", &UploadShare, py::arg("placement"),
           py::arg("buffers"), py::kw_only(), py::arg("upload_id"),
           py::arg("rank"), py::arg("ranks"), py::arg("timeout_ms"),
           py::arg("options") = py::none(), py::arg("quantize_to") = py::none(),
           py::arg("fp8_block") = py::none(),
           "Uploads this process's share of a revision uploaded by `ranks` "
           "processes together; returns the committed manifest.")
      .def("load_buffers", &Load, py::arg("manifest"), py::arg("target"),
           py::arg("buffers"), py::arg("options") = py::none(),
           py::arg("progress") = py::none(), py::arg("convert") = false,
           py::arg("fp8_block") = py::none(),
           "Loads a revision (manifest key or manifest) into target buffers.");
  RegisterMaintenance(c);
  m.def(
      "redact_uri",
      [](py::object uri) { return RedactUriPassword(ToStr(uri, "uri")); },
      py::arg("uri"),
      "The URI as messages show it: everything between '//' and the last "
      "'@' hidden (a well-formed user stays).");
}

}  // namespace reshard::python
