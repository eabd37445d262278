// Converting loads in bounded memory (WeightStoreOptions::convert,
// CheckpointLoadOptions::convert): the ranged reads fill the conversion's
// staging placement (conversion.h) part by part, and each part converts
// into the targets before the next part's staging is allocated.

#ifndef RESHARD_STORE_CONVERTING_LOAD_H_
#define RESHARD_STORE_CONVERTING_LOAD_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/weight_store.h"

namespace reshard::internal {

// Loads `placement` (a part of the staging placement: whole tensors, every
// fragment of each) into `bindings` (the caller's participants), checked
// once by LoadConverting and not to be checked again.
using PartLoad = std::function<Result<LoadReport>(
    const WeightPlacementManifest& placement, const CheckedBindings& bindings)>;

// `staging`'s tensors `tensors` with every fragment of each, as a
// placement of its own (a part a load fills on its own).
Result<WeightPlacementManifest> PartOf(
    const WeightPlacementManifest& staging,
    const std::set<std::string, std::less<>>& tensors);

// Adds the counts of `part` to `total` (staging_bytes: the larger).
void AddLoadReport(const LoadReport& part, LoadReport* total);

// Runs the load of `plan.target()`'s bound fragments in parts: first the
// tensors that do not convert, straight into the targets (one `load`);
// then the converting tensors in groups of whole tensors whose staging
// (the caller's fragments in the source's dtypes, with their scales) fits
// `staging_budget` bytes (a larger tensor is a group of its own), each
// loaded into host buffers and converted on `threads` threads. The
// converting targets must be contiguous host memory. The report sums the
// parts; its conversion_bytes is the largest group's staging.
Result<LoadReport> LoadConverting(
    const ConversionPlan& plan,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    uint64_t staging_budget, uint32_t threads, const PartLoad& load);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_CONVERTING_LOAD_H_
