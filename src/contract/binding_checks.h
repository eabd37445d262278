// The checks behind ValidateRuntimeBinding and CheckedBindings, shared by
// binding.cc (one binding) and checked_bindings.cc (sets of bindings), and
// the test observer that counts them.

#ifndef RESHARD_CONTRACT_BINDING_CHECKS_H_
#define RESHARD_CONTRACT_BINDING_CHECKS_H_

#include <functional>
#include <string>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::internal {

// One bound view: the binding's address space (its instance), the runtime
// view and the placement fragment it binds.
struct BindingView {
  const std::string* instance;
  const RuntimeBindingFragment* runtime;
  const PlacementFragment* logical;
};

// Rules 30-34 for one binding against its placement (attestation, known
// participant, exactly its fragments, geometry, canonical strides);
// appends its views for CheckAddressRanges. This is "checking a binding":
// every call is reported to the check observer.
Status CheckBinding(const WeightPlacementManifest& placement,
                    const WeightRuntimeBindingManifest& binding,
                    std::vector<BindingView>* views);

// Rules 35-36 over views of one or more bindings (sorts `views`). Address
// spaces are (instance_id, worker_id, device); the endpoint is routing only.
Status CheckAddressRanges(const WeightPlacementManifest& placement,
                          std::vector<BindingView>* views);

// Tests only: called with each binding CheckBinding checks, before the
// check; empty (the default) calls nothing. Checks may run on several
// threads at once (live ranks in one process), so the observer must be
// thread-safe; set it only while no check runs.
using BindingCheckObserver =
    std::function<void(const WeightRuntimeBindingManifest& binding)>;
void SetBindingCheckObserverForTesting(BindingCheckObserver observer);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_BINDING_CHECKS_H_
