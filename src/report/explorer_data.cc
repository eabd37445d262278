#include "report/explorer_data.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

namespace reshard::internal {
namespace {

// Each tensor's fragments (sorted by box, then participant) and regions.
struct TensorMembers {
  std::vector<uint32_t> source;
  std::vector<uint32_t> target;
  std::vector<uint32_t> regions;
  uint64_t bytes = 0;
};

std::vector<TensorMembers> GroupByTensor(const LogicalTransferPlan& plan,
                                         const ReportModel& model) {
  std::vector<TensorMembers> members(plan.tensors().size());
  const auto& sf = plan.source_fragments();
  const auto& tf = plan.target_fragments();
  for (uint32_t i = 0; i < sf.size(); ++i)
    members[sf[i].tensor].source.push_back(i);
  for (uint32_t i = 0; i < tf.size(); ++i)
    members[tf[i].tensor].target.push_back(i);
  const auto& regions = plan.regions();
  for (uint32_t i = 0; i < regions.size(); ++i) {
    members[regions[i].tensor].regions.push_back(i);
    members[regions[i].tensor].bytes += regions[i].bytes;
  }
  auto by_box = [](const std::vector<PlanFragment>& f, const ReportSide& side) {
    return [&f, &side](uint32_t a, uint32_t b) {
      if (f[a].global_offset != f[b].global_offset) {
        return f[a].global_offset < f[b].global_offset;
      }
      return side.position[f[a].participant] < side.position[f[b].participant];
    };
  };
  for (TensorMembers& m : members) {
    std::sort(m.source.begin(), m.source.end(), by_box(sf, model.source));
    std::sort(m.target.begin(), m.target.end(), by_box(tf, model.target));
  }
  return members;
}

void WriteFragments(const std::vector<PlanFragment>& all,
                    const std::vector<uint32_t>& indices,
                    const ReportSide& side, CanonicalJsonWriter* w) {
  w->BeginArray();
  for (uint32_t i : indices) {
    const PlanFragment& f = all[i];
    w->UInt(side.position[f.participant]);
    for (int64_t v : f.global_offset) w->Int(v);
    for (int64_t v : f.local_shape) w->Int(v);
  }
  w->EndArray();
}

// The record of one tensor as canonical JSON. `local` maps a plan fragment
// index to its position in the tensor's list (one table per side).
std::string RecordJson(const LogicalTransferPlan& plan,
                       const ReportModel& model, const TensorMembers& m,
                       std::vector<uint32_t>* source_local,
                       std::vector<uint32_t>* target_local) {
  for (uint32_t k = 0; k < m.source.size(); ++k)
    (*source_local)[m.source[k]] = k;
  for (uint32_t k = 0; k < m.target.size(); ++k)
    (*target_local)[m.target[k]] = k;
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  pairs.reserve(m.regions.size());
  for (uint32_t r : m.regions) {
    const TransferRegion& region = plan.regions()[r];
    pairs.emplace_back((*source_local)[region.source_fragment],
                       (*target_local)[region.target_fragment]);
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("r");
  w.BeginArray();
  for (const auto& [s, t] : pairs) {
    w.UInt(s);
    w.UInt(t);
  }
  w.EndArray();
  w.Key("s");
  WriteFragments(plan.source_fragments(), m.source, model.source, &w);
  w.Key("t");
  WriteFragments(plan.target_fragments(), m.target, model.target, &w);
  w.EndObject();
  return out;
}

}  // namespace

void WriteExplorerData(const LogicalTransferPlan& plan,
                       const ReportModel& model,
                       const std::vector<const TensorDescriptor*>& descriptors,
                       uint64_t max_items, CanonicalJsonWriter* w) {
  const std::vector<TensorMembers> members = GroupByTensor(plan, model);
  std::vector<uint32_t> source_local(plan.source_fragments().size());
  std::vector<uint32_t> target_local(plan.target_fragments().size());
  std::map<std::string, uint32_t> dtypes;
  for (const TensorDescriptor* d : descriptors) dtypes.emplace(d->dtype(), 0);
  uint32_t next = 0;
  for (auto& [name, index] : dtypes) index = next++;
  std::unordered_map<std::string, int64_t> record_of;
  std::vector<const std::string*> records;
  std::vector<int64_t> tensor_record(members.size(), -1);
  uint64_t items = 0;
  uint64_t omitted = 0;
  for (size_t t = 0; t < members.size(); ++t) {
    const TensorMembers& m = members[t];
    const uint64_t cost = m.source.size() + m.target.size() + m.regions.size();
    std::string json = RecordJson(plan, model, m, &source_local, &target_local);
    auto found = record_of.find(json);
    if (found != record_of.end()) {
      tensor_record[t] = found->second;
    } else if (items + cost <= max_items) {
      items += cost;
      auto [it, inserted] = record_of.emplace(
          std::move(json), static_cast<int64_t>(records.size()));
      records.push_back(&it->first);
      tensor_record[t] = it->second;
    } else {
      ++omitted;
    }
  }
  w->BeginObject();
  w->Key("dtypes");
  w->BeginArray();
  for (const auto& [name, index] : dtypes) w->String(name);
  w->EndArray();
  w->KeyUInt("omitted", omitted);
  w->Key("records");
  w->BeginArray();
  for (const std::string* r : records) w->Raw(*r);
  w->EndArray();
  w->Key("tensors");
  w->BeginArray();
  for (size_t t = 0; t < members.size(); ++t) {
    const TensorDescriptor& d = *descriptors[t];
    w->BeginArray();
    w->String(plan.tensors()[t]);
    w->IntArray(d.global_shape());
    w->UInt(dtypes.at(d.dtype()));
    w->Int(d.itemsize());
    w->UInt(members[t].bytes);
    w->UInt(members[t].regions.size());
    w->UInt(members[t].source.size());
    w->UInt(members[t].target.size());
    w->Int(tensor_record[t]);
    w->EndArray();
  }
  w->EndArray();
  w->EndObject();
}

}  // namespace reshard::internal
