// The planner (plan.h): plan(), the address-free LogicalTransferPlan with
// its summary, fragments, regions (objects or numpy columns), routes and
// traffic matrix; its HTML report and SVG heatmap (plan_report.h).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "reshard/plan.h"
#include "reshard/plan_report.h"
#include "reshard/stored_manifest.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

PlanOptions OptionsOf(py::object target_participant_id,
                      py::object max_transfer_regions,
                      py::object max_operations) {
  PlanOptions o;
  o.target_participant_id =
      ToOptionalStr(target_participant_id, "plan.target_participant_id");
  if (!max_transfer_regions.is_none()) {
    o.limits.max_transfer_regions =
        ToU64(max_transfer_regions, "plan.max_transfer_regions");
  }
  if (!max_operations.is_none()) {
    o.limits.max_operations = ToU64(max_operations, "plan.max_operations");
  }
  return o;
}

LogicalTransferPlan MakePlan(py::object source, py::object target_object,
                             const PlanOptions& options) {
  if (!py::isinstance<WeightPlacementManifest>(target_object)) {
    ThrowInvalid("plan target", "must be a WeightPlacementManifest");
  }
  const auto& target = target_object.cast<const WeightPlacementManifest&>();
  if (py::isinstance<StoredWeightManifest>(source)) {
    const auto& stored = source.cast<const StoredWeightManifest&>();
    py::gil_scoped_release release;
    return Unwrap(LogicalTransferPlan::MakeFromStored(stored, target, options));
  }
  if (!py::isinstance<WeightPlacementManifest>(source)) {
    ThrowInvalid("plan source",
                 "must be a WeightPlacementManifest or StoredWeightManifest");
  }
  const auto& placement = source.cast<const WeightPlacementManifest&>();
  py::gil_scoped_release release;
  return Unwrap(LogicalTransferPlan::Make(placement, target, options));
}

// ReplicaPolicy by name: "balanced" or "reference".
ReplicaPolicy ToReplicaPolicy(py::handle value) {
  const std::string name = ToStr(value, "plan.replica_policy");
  if (name == "balanced") return ReplicaPolicy::kBalanced;
  if (name == "reference") return ReplicaPolicy::kReference;
  ThrowInvalid("plan.replica_policy",
               "must be 'balanced' or 'reference', got '" + name + "'");
}

// The plan keeps the two layouts it was made from (for its report).
py::object Plan(py::object source, py::object target,
                py::object target_participant_id,
                py::object max_transfer_regions, py::object max_operations,
                bool convert, py::object fp8_block, py::object replica_policy) {
  PlanOptions options =
      OptionsOf(target_participant_id, max_transfer_regions, max_operations);
  options.replica_policy = ToReplicaPolicy(replica_policy);
  options.convert = convert;
  options.fp8_block = ToFp8Block(fp8_block, "plan.fp8_block");
  py::object plan = py::cast(MakePlan(source, target, options));
  plan.attr("_source_layout") = source;
  plan.attr("_target_layout") = target;
  return plan;
}

// The layouts a plan from plan() keeps, as the report wants them.
PlanReportLayouts LayoutsOf(py::object plan) {
  if (!py::hasattr(plan, "_source_layout") ||
      !py::hasattr(plan, "_target_layout")) {
    ThrowInvalid("plan", "does not know its layouts (make it with plan())");
  }
  py::object source = plan.attr("_source_layout");
  const auto& target =
      plan.attr("_target_layout").cast<const WeightPlacementManifest&>();
  if (py::isinstance<StoredWeightManifest>(source)) {
    return PlanReportLayouts::Of(source.cast<const StoredWeightManifest&>(),
                                 target);
  }
  return PlanReportLayouts::Of(source.cast<const WeightPlacementManifest&>(),
                               target);
}

PlanReportOptions ReportOptionsOf(py::object max_heatmap_axis,
                                  py::object max_explorer_items) {
  PlanReportOptions o;
  if (!max_heatmap_axis.is_none()) {
    const uint64_t v = ToU64(max_heatmap_axis, "max_heatmap_axis");
    o.max_heatmap_axis =
        static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
  }
  if (!max_explorer_items.is_none()) {
    o.max_explorer_items = ToU64(max_explorer_items, "max_explorer_items");
  }
  return o;
}

std::string ToHtml(py::object self, py::object gbps, py::object title,
                   py::object max_heatmap_axis, py::object max_explorer_items) {
  const auto& plan = self.cast<const LogicalTransferPlan&>();
  const PlanReportLayouts layouts = LayoutsOf(self);
  PlanReportOptions o = ReportOptionsOf(max_heatmap_axis, max_explorer_items);
  if (!title.is_none()) o.title = ToStr(title, "title");
  if (gbps.is_none()) {
    py::gil_scoped_release release;
    o.gbps = MeasureMemcpyGbps();
    o.gbps_origin = "memcpy measured on this host";
  } else {
    if (py::isinstance<py::bool_>(gbps) ||
        !(py::isinstance<py::float_>(gbps) || py::isinstance<py::int_>(gbps))) {
      ThrowInvalid("gbps", "must be a number of GB/s");
    }
    o.gbps = gbps.cast<double>();
  }
  py::gil_scoped_release release;
  return Unwrap(RenderPlanReportHtml(plan, layouts, o));
}

std::string ToSvg(py::object self, py::object max_heatmap_axis) {
  const auto& plan = self.cast<const LogicalTransferPlan&>();
  const PlanReportLayouts layouts = LayoutsOf(self);
  const PlanReportOptions o = ReportOptionsOf(max_heatmap_axis, py::none());
  py::gil_scoped_release release;
  return Unwrap(RenderTrafficHeatmapSvg(plan, layouts, o));
}

py::dict SummaryOf(const LogicalTransferPlan& p) { return DictOf(p.summary()); }

py::dict FragmentDict(const LogicalTransferPlan& p, const PlanFragment& f) {
  py::dict d;
  d["fragment_id"] = f.fragment_id;
  d["participant_id"] = f.participant_id;
  d["rank"] = f.rank;
  d["pipeline_stage_id"] = f.pipeline_stage_id.has_value()
                               ? py::object(py::int_(*f.pipeline_stage_id))
                               : py::object(py::none());
  d["tensor_id"] = p.tensors()[f.tensor];
  d["global_offset"] = DimsTuple(f.global_offset);
  d["local_shape"] = DimsTuple(f.local_shape);
  d["nbytes"] = f.nbytes;
  return d;
}

py::list FragmentList(const LogicalTransferPlan& p,
                      const std::vector<PlanFragment>& fragments) {
  py::list out;
  for (const PlanFragment& f : fragments) out.append(FragmentDict(p, f));
  return out;
}

py::dict RegionDict(const LogicalTransferPlan& p, const TransferRegion& r) {
  py::dict d;
  d["tensor_id"] = p.tensors()[r.tensor];
  d["source_fragment_id"] = p.source_fragments()[r.source_fragment].fragment_id;
  d["target_fragment_id"] = p.target_fragments()[r.target_fragment].fragment_id;
  d["overlap_offset"] = DimsTuple(r.overlap_offset);
  d["overlap_shape"] = DimsTuple(r.overlap_shape);
  d["source_base_offset"] = r.source_base_offset;
  d["target_base_offset"] = r.target_base_offset;
  d["inner_bytes"] = r.inner_bytes;
  py::list loops;
  for (const OuterLoop& l : r.loops) {
    loops.append(py::make_tuple(l.count, l.source_stride, l.target_stride));
  }
  d["loops"] = loops;
  d["segments"] = r.segments;
  d["bytes"] = r.bytes;
  return d;
}

// One numpy column per scalar field of the regions, in plan order.
py::dict RegionArrays(const LogicalTransferPlan& p) {
  const auto& regions = p.regions();
  const py::ssize_t n = static_cast<py::ssize_t>(regions.size());
  py::array_t<uint32_t> tensor(n), source(n), target(n), loops(n);
  py::array_t<uint64_t> source_base(n), target_base(n), inner(n), segments(n),
      bytes(n);
  auto t = tensor.mutable_unchecked<1>();
  auto s = source.mutable_unchecked<1>();
  auto g = target.mutable_unchecked<1>();
  auto l = loops.mutable_unchecked<1>();
  auto sb = source_base.mutable_unchecked<1>();
  auto tb = target_base.mutable_unchecked<1>();
  auto in = inner.mutable_unchecked<1>();
  auto sg = segments.mutable_unchecked<1>();
  auto by = bytes.mutable_unchecked<1>();
  for (py::ssize_t i = 0; i < n; ++i) {
    const TransferRegion& r = regions[static_cast<size_t>(i)];
    t(i) = r.tensor;
    s(i) = r.source_fragment;
    g(i) = r.target_fragment;
    l(i) = static_cast<uint32_t>(r.loops.size());
    sb(i) = r.source_base_offset;
    tb(i) = r.target_base_offset;
    in(i) = r.inner_bytes;
    sg(i) = r.segments;
    by(i) = r.bytes;
  }
  py::dict d;
  d["tensor"] = tensor;
  d["source_fragment"] = source;
  d["target_fragment"] = target;
  d["loops"] = loops;
  d["source_base_offset"] = source_base;
  d["target_base_offset"] = target_base;
  d["inner_bytes"] = inner;
  d["segments"] = segments;
  d["bytes"] = bytes;
  return d;
}

py::list RoutesOf(const LogicalTransferPlan& p) {
  py::list out;
  for (const PipelineRoute& r : p.pipeline_routes()) {
    py::dict d;
    d["source_pp"] = r.source_pp;
    d["source_stage"] = r.source_stage;
    d["target_pp"] = r.target_pp;
    d["target_stage"] = r.target_stage;
    d["operations"] = r.operations;
    d["bytes"] = r.bytes;
    out.append(d);
  }
  return out;
}

py::list TrafficOf(const LogicalTransferPlan& p) {
  py::list out;
  for (const TrafficEntry& e : p.traffic()) {
    out.append(py::make_tuple(p.source_participants()[e.source_participant],
                              p.target_participants()[e.target_participant],
                              e.bytes));
  }
  return out;
}

void RegisterPlanAccessors(py::class_<LogicalTransferPlan>& c) {
  using P = LogicalTransferPlan;
  c.def_property_readonly("source_kind",
                          [](const P& p) {
                            return p.source_kind() == PlanSourceKind::kPlacement
                                       ? "placement"
                                       : "stored_manifest";
                          })
      .def_property_readonly("resource_id", &P::resource_id)
      .def_property_readonly("revision", &P::revision)
      .def_property_readonly("source_placement_id", &P::source_placement_id)
      .def_property_readonly("target_placement_id", &P::target_placement_id)
      .def_property_readonly(
          "tensors", [](const P& p) { return StringsTuple(p.tensors()); })
      .def_property_readonly("summary", &SummaryOf)
      .def_property_readonly("num_regions",
                             [](const P& p) { return p.regions().size(); })
      .def_property_readonly(
          "source_fragments",
          [](const P& p) { return FragmentList(p, p.source_fragments()); })
      .def_property_readonly(
          "target_fragments",
          [](const P& p) { return FragmentList(p, p.target_fragments()); })
      .def_property_readonly(
          "source_participants",
          [](const P& p) { return StringsTuple(p.source_participants()); })
      .def_property_readonly(
          "target_participants",
          [](const P& p) { return StringsTuple(p.target_participants()); })
      .def_property_readonly("source_bytes", &P::source_bytes)
      .def_property_readonly("target_bytes", &P::target_bytes)
      .def_property_readonly("pipeline_routes", &RoutesOf)
      .def_property_readonly("traffic", &TrafficOf);
}

}  // namespace

void RegisterPlan(py::module_& m) {
  py::class_<LogicalTransferPlan> c(
      m, "LogicalTransferPlan", py::dynamic_attr(),
      "An address-free plan: the overlap regions that move a source layout "
      "(a placement or a stored revision) into a target placement.");
  RegisterPlanAccessors(c);
  c.def(
       "region",
       [](const LogicalTransferPlan& p, size_t i) {
         if (i >= p.regions().size()) throw py::index_error("region index");
         return RegionDict(p, p.regions()[i]);
       },
       py::arg("index"), "Region `index` as a dict.")
      .def(
          "regions",
          [](const LogicalTransferPlan& p) {
            py::list out;
            for (const TransferRegion& r : p.regions()) {
              out.append(RegionDict(p, r));
            }
            return out;
          },
          "Every region as a dict, in plan order.")
      .def("region_arrays", &RegionArrays,
           "The regions' scalar fields as numpy columns (indices into "
           "tensors, source_fragments and target_fragments).")
      .def(
          "describe_region",
          [](const LogicalTransferPlan& p, size_t i) {
            if (i >= p.regions().size()) throw py::index_error("region index");
            return p.DescribeRegion(p.regions()[i]);
          },
          py::arg("index"))
      .def("to_json", &PlanSummaryToJson,
           "The plan summary JSON, byte for byte what `reshard plan --json` "
           "prints.")
      .def("to_html", &ToHtml, py::kw_only(), py::arg("gbps") = py::none(),
           py::arg("title") = py::none(),
           py::arg("max_heatmap_axis") = py::none(),
           py::arg("max_explorer_items") = py::none(),
           "The self-contained HTML report, byte for byte what `reshard "
           "plan --html` writes for the same options; gbps None measures "
           "this host's memcpy bandwidth (docs/plan-report.md).")
      .def("to_svg", &ToSvg, py::kw_only(),
           py::arg("max_heatmap_axis") = py::none(),
           "The traffic heatmap as a standalone SVG document, as `reshard "
           "plan --svg` writes it.")
      .def("__repr__", [](const LogicalTransferPlan& p) {
        return "LogicalTransferPlan(" + std::to_string(p.regions().size()) +
               " regions, " + std::to_string(p.summary().bytes) + " bytes)";
      });
  m.def("plan", &Plan, py::arg("source"), py::arg("target"), py::kw_only(),
        py::arg("target_participant_id") = py::none(),
        py::arg("max_transfer_regions") = py::none(),
        py::arg("max_operations") = py::none(), py::arg("convert") = false,
        py::arg("fp8_block") = py::none(),
        py::arg("replica_policy") = "balanced",
        "Plans `target` from `source` (a placement or a stored manifest). "
        "With convert=True, tensors whose dtype differs convert "
        "(docs/conversion.md; fp8_block=(rows, cols), default (128, 128)). "
        "replica_policy: 'balanced' (every replica serves) or 'reference' "
        "(the reference prototype's choice; docs/planner.md). "
        "Releases the GIL while planning.");
  m.def(
      "measure_memcpy_gbps",
      [](double budget_ms) {
        if (!(budget_ms >= 0 && budget_ms <= 10000)) {
          ThrowInvalid("budget_ms", "must be 0..10000");
        }
        py::gil_scoped_release release;
        return MeasureMemcpyGbps(
            std::chrono::milliseconds(static_cast<int64_t>(budget_ms)));
      },
      py::arg("budget_ms") = 30,
      "This host's single-threaded memcpy bandwidth in GB/s (best of "
      "repeated 32 MiB copies within about budget_ms), the report's "
      "default bandwidth.");
}

}  // namespace reshard::python
