// reshard.WeightPlacementManifest (alias reshard.Placement): a complete,
// validated layout with its canonical ids, and its JSON wire form.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "reshard/placement.h"
#include "reshard/stored_manifest.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

WeightPlacementManifest MakePlacement(
    py::object resource_id, py::object revision, py::object weight_generation,
    py::object placement_set_id, const ParallelTopology& topology,
    py::object parts, py::object placement_id) {
  WeightPlacementManifestSpec s{
      .header = ToHeader(resource_id, revision, weight_generation,
                         placement_set_id, "WeightPlacementManifest"),
      .topology = topology,
      .parts = ToList<WeightPlacementPart>(
          parts, "WeightPlacementManifest.parts", "WeightPlacementPart"),
      .placement_id =
          ToOptionalStr(placement_id, "WeightPlacementManifest.placement_id")};
  return Unwrap(WeightPlacementManifest::Make(std::move(s)));
}

WeightPlacementManifest FromFragments(
    py::object resource_id, py::object revision, py::object weight_generation,
    py::object placement_set_id, const ParallelTopology& topology,
    py::object tensors, py::object fragments) {
  return Unwrap(WeightPlacementManifest::FromFragments(
      ToHeader(resource_id, revision, weight_generation, placement_set_id,
               "WeightPlacementManifest"),
      topology,
      ToList<TensorDescriptor>(tensors, "WeightPlacementManifest.tensors",
                               "TensorDescriptor"),
      ToList<PlacementFragment>(fragments, "WeightPlacementManifest.fragments",
                                "PlacementFragment")));
}

WeightPlacementManifest FromJson(py::object text) {
  std::string json;
  if (py::isinstance<py::bytes>(text)) {
    json = text.cast<std::string>();
  } else {
    json = ToStr(text, "placement JSON");
  }
  py::gil_scoped_release release;
  return Unwrap(WeightPlacementFromJson(json));
}

py::tuple FragmentsOf(const WeightPlacementManifest& p) {
  py::tuple t(p.fragments().size());
  for (size_t i = 0; i < p.fragments().size(); ++i) {
    t[i] = py::cast(*p.fragments()[i]);
  }
  return t;
}

void RegisterAccessors(py::class_<WeightPlacementManifest>& c) {
  c.def_property_readonly(
       "resource_kind",
       [](const WeightPlacementManifest&) {
         return std::string(WeightPlacementManifest::kResourceKind);
       })
      .def_property_readonly("resource_id",
                             &WeightPlacementManifest::resource_id)
      .def_property_readonly("revision", &WeightPlacementManifest::revision)
      .def_property_readonly("weight_generation",
                             &WeightPlacementManifest::weight_generation)
      .def_property_readonly("placement_set_id",
                             &WeightPlacementManifest::placement_set_id)
      .def_property_readonly("topology", &WeightPlacementManifest::topology)
      .def_property_readonly("topology_id",
                             [](const WeightPlacementManifest& p) {
                               return p.topology().topology_id();
                             })
      .def_property_readonly("parts",
                             [](const WeightPlacementManifest& p) {
                               return py::tuple(py::cast(p.parts()));
                             })
      .def_property_readonly("tensors",
                             [](const WeightPlacementManifest& p) {
                               return py::tuple(py::cast(p.tensors()));
                             })
      .def_property_readonly("fragments", &FragmentsOf)
      .def_property_readonly("placement_id",
                             &WeightPlacementManifest::placement_id)
      .def_property_readonly("digest", &WeightPlacementManifest::digest)
      // The keys and values `reshard validate --json` reports of it (but
      // "bindings" and "valid"; VisitFields, placement.h).
      .def("summary",
           [](const WeightPlacementManifest& m) { return DictOf(m); });
}

void RegisterLookups(py::class_<WeightPlacementManifest>& c) {
  c.def(
       "find_tensor",
       [](const WeightPlacementManifest& p, std::string_view id) -> py::object {
         const TensorDescriptor* t = p.FindTensor(id);
         return t == nullptr ? py::object(py::none()) : py::cast(*t);
       },
       py::arg("tensor_id"), "The descriptor of `tensor_id`, or None.")
      .def(
          "find_part",
          [](const WeightPlacementManifest& p,
             std::string_view id) -> py::object {
            const WeightPlacementPart* part = p.FindPart(id);
            return part == nullptr ? py::object(py::none()) : py::cast(*part);
          },
          py::arg("participant_id"), "The part of a participant, or None.")
      .def(
          "find_fragment",
          [](const WeightPlacementManifest& p,
             std::string_view id) -> py::object {
            const PlacementFragment* f = p.FindFragment(id);
            return f == nullptr ? py::object(py::none()) : py::cast(*f);
          },
          py::arg("placement_fragment_id"), "A fragment by id, or None.")
      .def(
          "for_revision",
          [](const WeightPlacementManifest& p, py::object revision,
             py::object generation) {
            std::string rev;
            uint64_t gen = 0;
            if (py::isinstance<StoredWeightManifest>(revision)) {
              const auto& m = revision.cast<const StoredWeightManifest&>();
              if (m.resource_id() != p.resource_id()) {
                ThrowInvalid("for_revision",
                             "the stored revision is of resource " +
                                 m.resource_id() + ", the placement of " +
                                 p.resource_id());
              }
              if (!generation.is_none()) {
                ThrowInvalid("for_revision",
                             "takes no weight_generation with a stored "
                             "manifest (it has its own)");
              }
              rev = m.revision();
              gen = m.weight_generation();
            } else {
              rev = ToStr(revision, "for_revision.revision");
              gen = generation.is_none()
                        ? p.weight_generation()
                        : ToU64(generation, "for_revision.weight_generation");
            }
            py::gil_scoped_release release;
            return Unwrap(WithRevision(p, std::move(rev), gen));
          },
          py::arg("revision"), py::arg("weight_generation") = py::none(),
          "This layout at another revision of its resource: a "
          "StoredWeightManifest (its revision and weight generation) or a "
          "revision name (and weight_generation, default this one's). "
          "Fragments, topology and tensors are unchanged; no layout is "
          "rebuilt.");
}

}  // namespace

void RegisterPlacement(py::module_& m) {
  py::class_<WeightPlacementManifest> c(
      m, "WeightPlacementManifest",
      "A complete, validated placement: every participant's part, with the "
      "canonical placement_id and digest.");
  c.def(py::init(&MakePlacement), py::arg("resource_id"), py::arg("revision"),
        py::arg("weight_generation"), py::arg("placement_set_id"),
        py::arg("topology"), py::arg("parts"),
        py::arg("placement_id") = py::none())
      .def_static("from_fragments", &FromFragments, py::arg("resource_id"),
                  py::arg("revision"), py::arg("weight_generation"),
                  py::arg("placement_set_id"), py::arg("topology"),
                  py::arg("tensors"), py::arg("fragments"),
                  "Groups a flat fragment inventory into parts by rank.")
      .def_static("from_json", &FromJson, py::arg("text"),
                  "Decodes and validates the canonical wire JSON (str or "
                  "bytes).")
      .def("to_json", &WeightPlacementToJson,
           "The canonical wire JSON (the bytes the digest hashes).")
      // Pickled as its wire JSON, revalidated on load.
      .def(py::pickle(
          [](const WeightPlacementManifest& p) {
            return py::make_tuple(WeightPlacementToJson(p));
          },
          [](py::tuple t) {
            return Unwrap(WeightPlacementFromJson(ToStr(t[0], "pickle")));
          }))
      .def("__eq__", [](const WeightPlacementManifest& a,
                        const WeightPlacementManifest& b) { return a == b; })
      .def("__hash__",
           [](const WeightPlacementManifest& p) {
             return py::hash(py::str(p.digest()));
           })
      .def("__repr__", [](const WeightPlacementManifest& p) {
        return "WeightPlacementManifest('" + p.resource_id() + "', revision='" +
               p.revision() + "', " + std::to_string(p.parts().size()) +
               " parts, " + std::to_string(p.tensors().size()) + " tensors, " +
               p.placement_id() + ")";
      });
  RegisterAccessors(c);
  RegisterLookups(c);
}

}  // namespace reshard::python
