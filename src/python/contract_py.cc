// Python classes of the placement contract (placement.h, binding.h,
// stored_manifest.h): immutable values built by the library's validating
// factories, so every rule of the contract applies to Python callers too.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <string>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/stored_manifest.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

py::object OptionalInt(const std::optional<int64_t>& v) {
  return v.has_value() ? py::object(py::int_(*v)) : py::object(py::none());
}

void RegisterRank(py::module_& m) {
  py::class_<ParallelRank>(m, "ParallelRank",
                           "A routing coordinate (dp, tp, pp, ep >= 0).")
      .def(py::init([](py::object dp, py::object tp, py::object pp,
                       py::object ep) {
             ParallelRank r;
             r.dp = ToI64(dp, "ParallelRank.dp");
             r.tp = ToI64(tp, "ParallelRank.tp");
             r.pp = ToI64(pp, "ParallelRank.pp");
             r.ep = ToI64(ep, "ParallelRank.ep");
             for (AxisKind k : kAllAxisKinds) {
               if (r.Get(k) < 0) {
                 ThrowInvalid("ParallelRank." + std::string(AxisKindName(k)),
                              "must be >= 0");
               }
             }
             return r;
           }),
           py::arg("dp") = 0, py::arg("tp") = 0, py::arg("pp") = 0,
           py::arg("ep") = 0)
      .def_readonly("dp", &ParallelRank::dp)
      .def_readonly("tp", &ParallelRank::tp)
      .def_readonly("pp", &ParallelRank::pp)
      .def_readonly("ep", &ParallelRank::ep)
      .def("__eq__",
           [](const ParallelRank& a, const ParallelRank& b) { return a == b; })
      .def("__lt__",
           [](const ParallelRank& a, const ParallelRank& b) { return a < b; })
      .def("__hash__",
           [](const ParallelRank& r) {
             return py::hash(py::make_tuple(r.dp, r.tp, r.pp, r.ep));
           })
      .def("__repr__", [](const ParallelRank& r) {
        return "ParallelRank(dp=" + std::to_string(r.dp) +
               ", tp=" + std::to_string(r.tp) + ", pp=" + std::to_string(r.pp) +
               ", ep=" + std::to_string(r.ep) + ")";
      });
}

AxisKind KindOf(py::handle kind, std::string_view field) {
  return Unwrap(ParseAxisKind(ToStr(kind, field)));
}

// GroupedSplitAxis, the contract extension (placement.h).
void RegisterGroupedSplitAxis(py::module_& m) {
  m.def(
      "GroupedSplitAxis",
      [](py::object kind, py::object dim, py::object shards) {
        return Unwrap(
            GroupedSplitAxis(KindOf(kind, "GroupedSplitAxis.kind"),
                             ToI64(dim, "GroupedSplitAxis.dim"),
                             ToI64(shards, "GroupedSplitAxis.shards")));
      },
      py::arg("kind"), py::arg("dim"), py::arg("shards"),
      "Ranks of `kind` split the tensor along `dim` into `shards` shards, "
      "each held by a contiguous group of size / shards ranks.");
  m.def(
      "PartialSplitAxis",
      [](py::object kind, py::object dim, py::object ranks) {
        return Unwrap(PartialSplitAxis(KindOf(kind, "PartialSplitAxis.kind"),
                                       ToI64(dim, "PartialSplitAxis.dim"),
                                       ToI64(ranks, "PartialSplitAxis.ranks")));
      },
      py::arg("kind"), py::arg("dim"), py::arg("ranks"),
      "The first `ranks` ranks of `kind` split the tensor along `dim`; the "
      "ranks after them hold no fragment of it.");
  m.def(
      "SpanningSplitAxis",
      [](py::object kind, py::object dim, py::object over) {
        return Unwrap(
            SpanningSplitAxis(KindOf(kind, "SpanningSplitAxis.kind"),
                              ToI64(dim, "SpanningSplitAxis.dim"),
                              KindOf(over, "SpanningSplitAxis.over")));
      },
      py::arg("kind"), py::arg("dim"), py::arg("over"),
      "Ranks of `kind` and `over` together split the tensor along `dim`: "
      "rank (o, k) holds part o * size(kind) + k (only tp over dp); the "
      "tensor declares no `over` axis.");
}

// The Python constructor call that makes `a`.
std::string AxisRepr(const ParallelAxis& a) {
  const std::string kind(AxisKindName(a.kind()));
  switch (a.semantics()) {
    case AxisSemantics::kSplit:
      if (a.shards() > 0) {
        return "GroupedSplitAxis('" + kind + "', " + std::to_string(a.dim()) +
               ", " + std::to_string(a.shards()) + ")";
      }
      if (a.ranks() > 0) {
        return "PartialSplitAxis('" + kind + "', " + std::to_string(a.dim()) +
               ", " + std::to_string(a.ranks()) + ")";
      }
      if (a.over().has_value()) {
        return "SpanningSplitAxis('" + kind + "', " + std::to_string(a.dim()) +
               ", '" + std::string(AxisKindName(*a.over())) + "')";
      }
      return "SplitAxis('" + kind + "', " + std::to_string(a.dim()) + ")";
    case AxisSemantics::kReplicated:
      return "ReplicatedAxis('" + kind + "')";
    case AxisSemantics::kOwnership:
      break;
  }
  return "OwnershipAxis('" + kind + "')";
}

void RegisterAxes(py::module_& m) {
  py::class_<ParallelAxis>(m, "ParallelAxis",
                           "Parallel semantics of one axis of a tensor.")
      .def_property_readonly(
          "semantics",
          [](const ParallelAxis& a) {
            return std::string(AxisSemanticsName(a.semantics()));
          })
      .def_property_readonly("kind",
                             [](const ParallelAxis& a) {
                               return std::string(AxisKindName(a.kind()));
                             })
      .def_property_readonly("dim",
                             [](const ParallelAxis& a) -> py::object {
                               if (a.semantics() != AxisSemantics::kSplit) {
                                 return py::none();
                               }
                               return py::int_(a.dim());
                             })
      .def_property_readonly("shards",
                             [](const ParallelAxis& a) -> py::object {
                               if (a.shards() == 0) return py::none();
                               return py::int_(a.shards());
                             })
      .def_property_readonly("ranks",
                             [](const ParallelAxis& a) -> py::object {
                               if (a.ranks() == 0) return py::none();
                               return py::int_(a.ranks());
                             })
      .def_property_readonly(
          "over",
          [](const ParallelAxis& a) -> py::object {
            if (!a.over().has_value()) return py::none();
            return py::str(std::string(AxisKindName(*a.over())));
          })
      .def("__eq__",
           [](const ParallelAxis& a, const ParallelAxis& b) { return a == b; })
      .def("__hash__",
           [](const ParallelAxis& a) {
             return py::hash(py::make_tuple(
                 static_cast<int>(a.semantics()), static_cast<int>(a.kind()),
                 a.dim(), a.shards(), a.ranks(),
                 a.over().has_value() ? static_cast<int>(*a.over()) : -1));
           })
      .def("__repr__", &AxisRepr);
  m.def(
      "SplitAxis",
      [](py::object kind, py::object dim) {
        return Unwrap(SplitAxis(KindOf(kind, "SplitAxis.kind"),
                                ToI64(dim, "SplitAxis.dim")));
      },
      py::arg("kind"), py::arg("dim"),
      "Ranks of `kind` (tp or ep) jointly partition the tensor along `dim`.");
  m.def(
      "ReplicatedAxis",
      [](py::object kind) {
        return ReplicatedAxis(KindOf(kind, "ReplicatedAxis.kind"));
      },
      py::arg("kind"), "Every rank of `kind` holds a complete copy.");
  m.def(
      "OwnershipAxis",
      [](py::object kind) {
        return OwnershipAxis(KindOf(kind, "OwnershipAxis.kind"));
      },
      py::arg("kind"), "Only the ranks named by fragments hold the tensor.");
  RegisterGroupedSplitAxis(m);
}

py::int_ ExactElements(const TensorDescriptor& t) {
  py::int_ n(1);
  for (int64_t e : t.global_shape()) n = n * py::int_(e);
  return n;
}

TensorDescriptor MakeDescriptor(py::object tensor_id, py::object global_shape,
                                py::object dtype, py::object itemsize,
                                py::object shard_dims,
                                py::object layout_fingerprint,
                                py::object parallel_axes, py::object layer_id,
                                py::object expert_id) {
  TensorDescriptorSpec s;
  s.tensor_id = ToStr(tensor_id, "TensorDescriptor.tensor_id");
  s.global_shape = ToDims(global_shape, "TensorDescriptor.global_shape");
  s.dtype = ToStr(dtype, "TensorDescriptor.dtype");
  s.itemsize = ToI64(itemsize, "TensorDescriptor.itemsize");
  s.shard_dims = ToDims(shard_dims, "TensorDescriptor.shard_dims");
  s.layout_fingerprint =
      ToStr(layout_fingerprint, "TensorDescriptor.layout_fingerprint");
  s.parallel_axes = ToList<ParallelAxis>(
      parallel_axes, "TensorDescriptor.parallel_axes", "ParallelAxis");
  s.layer_id = ToOptionalI64(layer_id, "TensorDescriptor.layer_id");
  s.expert_id = ToOptionalI64(expert_id, "TensorDescriptor.expert_id");
  return Unwrap(TensorDescriptor::Make(std::move(s)));
}

void RegisterDescriptor(py::module_& m) {
  py::class_<TensorDescriptor>(m, "TensorDescriptor",
                               "One logical tensor of a placement.")
      .def(py::init(&MakeDescriptor), py::arg("tensor_id"),
           py::arg("global_shape"), py::arg("dtype"), py::arg("itemsize"),
           py::arg("shard_dims") = py::tuple(),
           py::arg("layout_fingerprint") = "row-major",
           py::arg("parallel_axes") = py::tuple(),
           py::arg("layer_id") = py::none(), py::arg("expert_id") = py::none())
      .def_property_readonly("tensor_id", &TensorDescriptor::tensor_id)
      .def_property_readonly(
          "global_shape",
          [](const TensorDescriptor& t) { return DimsTuple(t.global_shape()); })
      .def_property_readonly("dtype", &TensorDescriptor::dtype)
      .def_property_readonly("itemsize", &TensorDescriptor::itemsize)
      .def_property_readonly(
          "shard_dims",
          [](const TensorDescriptor& t) { return DimsTuple(t.shard_dims()); })
      .def_property_readonly("layout_fingerprint",
                             &TensorDescriptor::layout_fingerprint)
      .def_property_readonly("parallel_axes",
                             [](const TensorDescriptor& t) {
                               return py::tuple(py::cast(t.parallel_axes()));
                             })
      .def_property_readonly(
          "layer_id",
          [](const TensorDescriptor& t) { return OptionalInt(t.layer_id()); })
      .def_property_readonly(
          "expert_id",
          [](const TensorDescriptor& t) { return OptionalInt(t.expert_id()); })
      // Exact Python integers (the C++ count saturates at 2^64 - 1).
      .def_property_readonly("num_elements", &ExactElements)
      .def_property_readonly("nbytes",
                             [](const TensorDescriptor& t) {
                               return ExactElements(t) * py::int_(t.itemsize());
                             })
      .def("__eq__", [](const TensorDescriptor& a,
                        const TensorDescriptor& b) { return a == b; })
      .def("__hash__",
           [](const TensorDescriptor& t) {
             return py::hash(py::str(t.tensor_id()));
           })
      .def("__repr__", [](const TensorDescriptor& t) {
        return "TensorDescriptor('" + t.tensor_id() + "', " +
               std::string(py::repr(DimsTuple(t.global_shape()))) + ", '" +
               t.dtype() + "')";
      });
}

PlacementFragment MakeFragment(py::object tensor_id, py::object global_offset,
                               py::object local_shape, py::object nbytes,
                               const ParallelRank& rank, py::object aliases,
                               py::object placement_fragment_id,
                               py::object pipeline_stage_id) {
  PlacementFragmentSpec s;
  s.tensor_id = ToStr(tensor_id, "PlacementFragment.tensor_id");
  s.global_offset = ToDims(global_offset, "PlacementFragment.global_offset");
  s.local_shape = ToDims(local_shape, "PlacementFragment.local_shape");
  s.nbytes = ToU64(nbytes, "PlacementFragment.nbytes");
  s.rank = rank;
  s.aliases = ToStrings(aliases, "PlacementFragment.aliases");
  s.placement_fragment_id = ToOptionalStr(
      placement_fragment_id, "PlacementFragment.placement_fragment_id");
  s.pipeline_stage_id =
      ToOptionalI64(pipeline_stage_id, "PlacementFragment.pipeline_stage_id");
  return Unwrap(PlacementFragment::Make(std::move(s)));
}

void RegisterFragment(py::module_& m) {
  py::class_<PlacementFragment>(m, "PlacementFragment",
                                "An address-free box of one tensor.")
      .def(py::init(&MakeFragment), py::arg("tensor_id"),
           py::arg("global_offset"), py::arg("local_shape"), py::arg("nbytes"),
           py::arg("rank"), py::arg("aliases") = py::tuple(),
           py::arg("placement_fragment_id") = py::none(),
           py::arg("pipeline_stage_id") = py::none())
      .def_property_readonly("placement_fragment_id",
                             &PlacementFragment::placement_fragment_id)
      .def_property_readonly("fragment_id",
                             &PlacementFragment::placement_fragment_id)
      .def_property_readonly("tensor_id", &PlacementFragment::tensor_id)
      .def_property_readonly("global_offset",
                             [](const PlacementFragment& f) {
                               return DimsTuple(f.global_offset());
                             })
      .def_property_readonly(
          "local_shape",
          [](const PlacementFragment& f) { return DimsTuple(f.local_shape()); })
      .def_property_readonly("nbytes", &PlacementFragment::nbytes)
      .def_property_readonly("rank", &PlacementFragment::rank)
      .def_property_readonly(
          "aliases",
          [](const PlacementFragment& f) { return StringsTuple(f.aliases()); })
      .def_property_readonly("pipeline_stage_id",
                             [](const PlacementFragment& f) {
                               return OptionalInt(f.pipeline_stage_id());
                             })
      .def("__eq__", [](const PlacementFragment& a,
                        const PlacementFragment& b) { return a == b; })
      .def("__hash__",
           [](const PlacementFragment& f) {
             return py::hash(py::str(f.placement_fragment_id()));
           })
      .def("__repr__", [](const PlacementFragment& f) {
        return "PlacementFragment('" + f.tensor_id() + "', offset=" +
               std::string(py::repr(DimsTuple(f.global_offset()))) +
               ", shape=" + std::string(py::repr(DimsTuple(f.local_shape()))) +
               ", rank=" + f.rank().ToString() + ")";
      });
}

ParallelTopology MakeTopology(py::object tp, py::object pp, py::object ep,
                              py::object dp, py::object participants,
                              py::object topology_id) {
  ParallelTopologySpec s;
  s.sizes.tp = ToI64(tp, "ParallelTopology.tp_size");
  s.sizes.pp = ToI64(pp, "ParallelTopology.pp_size");
  s.sizes.ep = ToI64(ep, "ParallelTopology.ep_size");
  s.sizes.dp = ToI64(dp, "ParallelTopology.dp_size");
  s.participants = ToList<TopologyParticipant>(
      participants, "ParallelTopology.participants", "TopologyParticipant");
  s.topology_id = ToOptionalStr(topology_id, "ParallelTopology.topology_id");
  return Unwrap(ParallelTopology::Make(std::move(s)));
}

void RegisterTopology(py::module_& m) {
  py::class_<TopologyParticipant>(m, "TopologyParticipant",
                                  "One participant and its rank.")
      .def(py::init([](py::object id, const ParallelRank& rank) {
             return TopologyParticipant{
                 ToStr(id, "TopologyParticipant.participant_id"), rank};
           }),
           py::arg("participant_id"), py::arg("rank"))
      .def_readonly("participant_id", &TopologyParticipant::participant_id)
      .def_readonly("rank", &TopologyParticipant::rank)
      .def("__eq__", [](const TopologyParticipant& a,
                        const TopologyParticipant& b) { return a == b; })
      .def("__repr__", [](const TopologyParticipant& p) {
        return "TopologyParticipant('" + p.participant_id + "', " +
               p.rank.ToString() + ")";
      });
  py::class_<ParallelTopology>(m, "ParallelTopology",
                               "Axis sizes and the participants of a layout.")
      .def(py::init(&MakeTopology), py::arg("tp_size") = 1,
           py::arg("pp_size") = 1, py::arg("ep_size") = 1,
           py::arg("dp_size") = 1, py::arg("participants") = py::tuple(),
           py::arg("topology_id") = py::none())
      .def_property_readonly("tp_size", &ParallelTopology::tp_size)
      .def_property_readonly("pp_size", &ParallelTopology::pp_size)
      .def_property_readonly("ep_size", &ParallelTopology::ep_size)
      .def_property_readonly("dp_size", &ParallelTopology::dp_size)
      .def_property_readonly("participants",
                             [](const ParallelTopology& t) {
                               return py::tuple(py::cast(t.participants()));
                             })
      .def_property_readonly("world_size", &ParallelTopology::world_size)
      .def_property_readonly("topology_id", &ParallelTopology::topology_id)
      .def("__eq__", [](const ParallelTopology& a,
                        const ParallelTopology& b) { return a == b; })
      .def("__hash__",
           [](const ParallelTopology& t) {
             return py::hash(py::str(t.topology_id()));
           })
      .def("__repr__", [](const ParallelTopology& t) {
        return "ParallelTopology(tp=" + std::to_string(t.tp_size()) +
               ", pp=" + std::to_string(t.pp_size()) +
               ", ep=" + std::to_string(t.ep_size()) +
               ", dp=" + std::to_string(t.dp_size()) + ", " +
               std::to_string(t.world_size()) + " participants)";
      });
}

WeightPlacementPart MakePart(py::object resource_id, py::object revision,
                             py::object weight_generation,
                             py::object placement_set_id,
                             py::object topology_id, py::object participant_id,
                             const ParallelRank& rank, py::object tensors,
                             py::object fragments) {
  WeightPlacementPartSpec s;
  s.header = ToHeader(resource_id, revision, weight_generation,
                      placement_set_id, "WeightPlacementPart");
  s.topology_id = ToStr(topology_id, "WeightPlacementPart.topology_id");
  s.participant_id =
      ToStr(participant_id, "WeightPlacementPart.participant_id");
  s.rank = rank;
  s.tensors = ToList<TensorDescriptor>(tensors, "WeightPlacementPart.tensors",
                                       "TensorDescriptor");
  s.fragments = ToList<PlacementFragment>(
      fragments, "WeightPlacementPart.fragments", "PlacementFragment");
  return Unwrap(WeightPlacementPart::Make(std::move(s)));
}

void RegisterPart(py::module_& m) {
  py::class_<WeightPlacementPart>(
      m, "WeightPlacementPart",
      "One participant's address-free contribution to a placement.")
      .def(py::init(&MakePart), py::arg("resource_id"), py::arg("revision"),
           py::arg("weight_generation"), py::arg("placement_set_id"),
           py::arg("topology_id"), py::arg("participant_id"), py::arg("rank"),
           py::arg("tensors") = py::tuple(), py::arg("fragments") = py::tuple())
      .def_property_readonly(
          "resource_id",
          [](const WeightPlacementPart& p) { return p.header().resource_id; })
      .def_property_readonly(
          "revision",
          [](const WeightPlacementPart& p) { return p.header().revision; })
      .def_property_readonly("weight_generation",
                             [](const WeightPlacementPart& p) {
                               return p.header().weight_generation;
                             })
      .def_property_readonly("placement_set_id",
                             [](const WeightPlacementPart& p) {
                               return p.header().placement_set_id;
                             })
      .def_property_readonly("topology_id", &WeightPlacementPart::topology_id)
      .def_property_readonly("participant_id",
                             &WeightPlacementPart::participant_id)
      .def_property_readonly("rank", &WeightPlacementPart::rank)
      .def_property_readonly("tensors",
                             [](const WeightPlacementPart& p) {
                               return py::tuple(py::cast(p.tensors()));
                             })
      .def_property_readonly("fragments",
                             [](const WeightPlacementPart& p) {
                               return py::tuple(py::cast(p.fragments()));
                             })
      .def("to_json", &WeightPlacementPartToJson,
           "The part's canonical JSON record (\"record\": "
           "\"weight-placement-part\").")
      .def_static(
          "from_json",
          [](const std::string& text) {
            return Unwrap(WeightPlacementPartFromJson(text));
          },
          py::arg("text"),
          "The part of a to_json record (str); refuses anything else with "
          "InvalidArgumentError naming the field.")
      .def("__repr__", [](const WeightPlacementPart& p) {
        return "WeightPlacementPart('" + p.participant_id() + "', " +
               std::to_string(p.fragments().size()) + " fragments)";
      });
}

}  // namespace

void RegisterContract(py::module_& m) {
  RegisterRank(m);
  RegisterAxes(m);
  RegisterDescriptor(m);
  RegisterFragment(m);
  RegisterTopology(m);
  RegisterPart(m);
  RegisterPlacement(m);
  RegisterBinding(m);
  RegisterStoredManifest(m);
}

}  // namespace reshard::python
