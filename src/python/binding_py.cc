// Runtime bindings (binding.h) and stored manifests (stored_manifest.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "reshard/binding.h"
#include "reshard/stored_manifest.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

RuntimeBindingFragment MakeRuntimeFragment(py::kwargs kw) {
  const std::string t = "RuntimeBindingFragment.";
  auto get = [&](const char* name) -> py::object {
    if (!kw.contains(name)) ThrowInvalid(t + name, "is required");
    return kw[name];
  };
  for (auto item : kw) {
    static const char* kFields[] = {"placement_fragment_id",
                                    "fragment_id",
                                    "address",
                                    "nbytes",
                                    "worker_id",
                                    "endpoint",
                                    "device",
                                    "itemsize",
                                    "local_shape",
                                    "strides_bytes",
                                    "storage_address",
                                    "storage_nbytes",
                                    "storage_offset_bytes"};
    const std::string key = py::str(item.first);
    bool known = false;
    for (const char* f : kFields) known = known || key == f;
    if (!known) ThrowInvalid(t + key, "is not a field");
  }
  RuntimeBindingFragmentSpec s;
  s.placement_fragment_id =
      ToStr(get("placement_fragment_id"), t + "placement_fragment_id");
  s.runtime_fragment_id = ToStr(get("fragment_id"), t + "fragment_id");
  s.address = ToU64(get("address"), t + "address");
  s.nbytes = ToU64(get("nbytes"), t + "nbytes");
  s.worker_id = ToStr(get("worker_id"), t + "worker_id");
  s.endpoint = ToStr(get("endpoint"), t + "endpoint");
  s.device = ToStr(get("device"), t + "device");
  s.itemsize = ToI64(get("itemsize"), t + "itemsize");
  s.local_shape = ToDims(get("local_shape"), t + "local_shape");
  s.strides_bytes = ToDims(get("strides_bytes"), t + "strides_bytes");
  s.storage_address = ToU64(get("storage_address"), t + "storage_address");
  s.storage_nbytes = ToU64(get("storage_nbytes"), t + "storage_nbytes");
  s.storage_offset_bytes =
      ToU64(get("storage_offset_bytes"), t + "storage_offset_bytes");
  return Unwrap(RuntimeBindingFragment::Make(std::move(s)));
}

void RegisterRuntimeFragment(py::module_& m) {
  using F = RuntimeBindingFragment;
  py::class_<F>(m, "RuntimeBindingFragment",
                "Where the live bytes of one placement fragment are.")
      .def(py::init(&MakeRuntimeFragment),
           "Keyword arguments: placement_fragment_id, fragment_id, address, "
           "nbytes, worker_id, endpoint, device, itemsize, local_shape, "
           "strides_bytes, storage_address, storage_nbytes, "
           "storage_offset_bytes.")
      .def_property_readonly("placement_fragment_id", &F::placement_fragment_id)
      .def_property_readonly("fragment_id", &F::runtime_fragment_id)
      .def_property_readonly("address", &F::address)
      .def_property_readonly("nbytes", &F::nbytes)
      .def_property_readonly("worker_id", &F::worker_id)
      .def_property_readonly("endpoint", &F::endpoint)
      .def_property_readonly("device", &F::device)
      .def_property_readonly("itemsize", &F::itemsize)
      .def_property_readonly(
          "local_shape", [](const F& f) { return DimsTuple(f.local_shape()); })
      .def_property_readonly(
          "strides_bytes",
          [](const F& f) { return DimsTuple(f.strides_bytes()); })
      .def_property_readonly("storage_address", &F::storage_address)
      .def_property_readonly("storage_nbytes", &F::storage_nbytes)
      .def_property_readonly("storage_offset_bytes", &F::storage_offset_bytes)
      .def("__eq__", [](const F& a, const F& b) { return a == b; });
}

WeightRuntimeBindingManifest MakeBinding(
    py::object resource_id, py::object placement_id,
    py::object placement_digest, py::object instance_id, py::object generation,
    py::object lease_id, py::object revision, py::object participant_id,
    py::object fragments) {
  const std::string t = "WeightRuntimeBindingManifest.";
  WeightRuntimeBindingManifestSpec s;
  s.resource_id = ToStr(resource_id, t + "resource_id");
  s.placement_id = ToStr(placement_id, t + "placement_id");
  s.placement_digest = ToStr(placement_digest, t + "placement_digest");
  s.instance_id = ToStr(instance_id, t + "instance_id");
  s.generation = ToU64(generation, t + "generation");
  s.lease_id = ToStr(lease_id, t + "lease_id");
  s.revision = ToStr(revision, t + "revision");
  s.participant_id = ToStr(participant_id, t + "participant_id");
  s.fragments = ToList<RuntimeBindingFragment>(fragments, t + "fragments",
                                               "RuntimeBindingFragment");
  return Unwrap(WeightRuntimeBindingManifest::Make(std::move(s)));
}

void RegisterBindingManifest(py::module_& m) {
  using B = WeightRuntimeBindingManifest;
  py::class_<B>(m, "WeightRuntimeBindingManifest",
                "One participant's runtime binding of a placement.")
      .def(py::init(&MakeBinding), py::arg("resource_id"),
           py::arg("placement_id"), py::arg("placement_digest"),
           py::arg("instance_id"), py::arg("generation"), py::arg("lease_id"),
           py::arg("revision"), py::arg("participant_id"), py::arg("fragments"))
      .def_static(
          "from_json",
          [](py::object text) {
            const std::string json = ToStr(text, "binding JSON");
            return Unwrap(WeightRuntimeBindingFromJson(json));
          },
          py::arg("text"))
      .def("to_json", &WeightRuntimeBindingToJson)
      .def(py::pickle(
          [](const B& b) {
            return py::make_tuple(WeightRuntimeBindingToJson(b));
          },
          [](py::tuple t) {
            return Unwrap(WeightRuntimeBindingFromJson(ToStr(t[0], "pickle")));
          }))
      .def_property_readonly(
          "resource_kind",
          [](const B&) { return std::string(B::kResourceKind); })
      .def_property_readonly("resource_id", &B::resource_id)
      .def_property_readonly("placement_id", &B::placement_id)
      .def_property_readonly("placement_digest", &B::placement_digest)
      .def_property_readonly("instance_id", &B::instance_id)
      .def_property_readonly("generation", &B::generation)
      .def_property_readonly("lease_id", &B::lease_id)
      .def_property_readonly("revision", &B::revision)
      .def_property_readonly("participant_id", &B::participant_id)
      .def_property_readonly(
          "fragments",
          [](const B& b) { return py::tuple(py::cast(b.fragments())); })
      .def("__repr__", [](const B& b) {
        return "WeightRuntimeBindingManifest('" + b.participant_id() + "', " +
               std::to_string(b.fragments().size()) + " fragments)";
      });
  m.def(
      "validate_runtime_binding",
      [](const WeightPlacementManifest& p, const B& b) {
        ThrowIfError(ValidateRuntimeBinding(p, b));
      },
      py::arg("placement"), py::arg("binding"),
      "Checks one binding against its placement (rules 29-36).");
  m.def(
      "validate_runtime_bindings",
      [](const WeightPlacementManifest& p, py::object bindings, bool subset) {
        ThrowIfError(ValidateRuntimeBindings(
            p, ToList<B>(bindings, "bindings", "WeightRuntimeBindingManifest"),
            subset ? BindingCoverage::kSubset : BindingCoverage::kEveryOwner));
      },
      py::arg("placement"), py::arg("bindings"), py::arg("subset") = false,
      "Checks a set of bindings: exactly the owning participants, or a "
      "subset of them when subset=True (rules 34-38).");
}

void RegisterStoredFragment(py::module_& m) {
  py::class_<StoredFragment>(m, "StoredFragment",
                             "One fragment of a stored revision.")
      .def_readonly("stored_fragment_id", &StoredFragment::stored_fragment_id)
      .def_property_readonly(
          "fragment_id",
          [](const StoredFragment& f) { return f.stored_fragment_id; })
      .def_readonly("tensor_id", &StoredFragment::tensor_id)
      .def_property_readonly(
          "global_offset",
          [](const StoredFragment& f) { return DimsTuple(f.global_offset); })
      .def_property_readonly(
          "local_shape",
          [](const StoredFragment& f) { return DimsTuple(f.local_shape); })
      .def_readonly("object_key", &StoredFragment::object_key)
      .def_readonly("object_offset", &StoredFragment::object_offset)
      .def_readonly("nbytes", &StoredFragment::nbytes)
      .def_property_readonly(
          "aliases",
          [](const StoredFragment& f) { return StringsTuple(f.aliases); })
      .def("__eq__", [](const StoredFragment& a, const StoredFragment& b) {
        return a == b;
      });
}

}  // namespace

void RegisterBinding(py::module_& m) {
  RegisterRuntimeFragment(m);
  RegisterBindingManifest(m);
}

void RegisterStoredManifest(py::module_& m) {
  RegisterStoredFragment(m);
  using S = StoredWeightManifest;
  py::class_<S>(m, "StoredWeightManifest",
                "The manifest of a committed store revision.")
      .def_static(
          "from_json",
          [](py::object text) {
            return Unwrap(StoredWeightManifestFromJson(
                ToStr(text, "stored manifest JSON")));
          },
          py::arg("text"))
      .def("to_json", &StoredWeightManifestToJson)
      .def(py::pickle(
          [](const S& s) {
            return py::make_tuple(StoredWeightManifestToJson(s));
          },
          [](py::tuple t) {
            return Unwrap(StoredWeightManifestFromJson(ToStr(t[0], "pickle")));
          }))
      .def_property_readonly(
          "resource_kind",
          [](const S&) { return std::string(S::kResourceKind); })
      .def_property_readonly("namespace", &S::namespace_id)
      .def_property_readonly("resource_id", &S::resource_id)
      .def_property_readonly("revision", &S::revision)
      .def_property_readonly("weight_generation", &S::weight_generation)
      .def_property_readonly("group_id", &S::group_id)
      .def_property_readonly("manifest_key", &S::manifest_key)
      .def_property_readonly("created_at", &S::created_at)
      .def_property_readonly(
          "tensors",
          [](const S& s) { return py::tuple(py::cast(s.tensors())); })
      .def_property_readonly(
          "fragments",
          [](const S& s) { return py::tuple(py::cast(s.fragments())); })
      .def_property_readonly("manifest_digest", &S::manifest_digest)
      // The revision's summary: the keys and values `reshard store show
      // --json` prints (VisitFields, stored_manifest.h).
      .def("summary", [](const S& s) { return DictOf(s); })
      .def("__repr__", [](const S& s) {
        return "StoredWeightManifest('" + s.manifest_key() + "', " +
               std::to_string(s.fragments().size()) + " fragments)";
      });
}

}  // namespace reshard::python
