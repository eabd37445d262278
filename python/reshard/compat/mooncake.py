"""Drop-in for the public API of ``mooncake.reshard.weight``.

Code written against that package runs unchanged after replacing
``from mooncake.reshard.weight import ...`` with
``from reshard.compat.mooncake import ...``. The values are frozen
dataclasses with the same fields, defaults, normalisation and errors
(ValueError with the contract's message fragments); validation, canonical
ids (placement_fragment_id, topology_id, placement_id, digest) and planning
run in reshard's native core, so ids and JSON equal those of the reshard
CLI byte for byte. The contract values have ``to_native()``, the
equivalent ``reshard._reshard`` object, and a plan's ``native_plan`` is the
native plan, usable with reshard's executors. docs/python-compat.md lists
what is covered and the known differences.
"""

from reshard.compat._mooncake_contract import (
    OwnershipAxis,
    ParallelRank,
    ParallelTopology,
    PlacementFragment,
    ReplicatedAxis,
    ResourceKind,
    RuntimeBindingFragment,
    SplitAxis,
    TensorDescriptor,
    TopologyParticipant,
    WeightPlacementManifest,
    WeightPlacementPart,
    WeightRuntimeBindingManifest,
    validate_runtime_binding,
    validate_runtime_bindings,
    weight_placement_from_json,
    weight_placement_to_json,
)
from reshard.compat._mooncake_planner import (
    LogicalTransferOperation,
    LogicalTransferPlan,
    PipelineRouteGroup,
    PlacementExecutorPlan,
    PlanningLimits,
    TransferRegion,
    plan_placement_transfer,
    plan_placement_transfer_to_local_target,
    plan_stored_transfer_to_target_placement,
)
from reshard.compat._mooncake_store import (
    StoredFragment,
    StoredFragmentSnapshot,
    StoredManifestIdentity,
    StoredWeightManifest,
    WeightManifest,
)

__all__ = [
    "ParallelRank",
    "ParallelTopology",
    "PlacementFragment",
    "WeightPlacementManifest",
    "WeightPlacementPart",
    "RuntimeBindingFragment",
    "WeightRuntimeBindingManifest",
    "SplitAxis",
    "ReplicatedAxis",
    "OwnershipAxis",
    "TensorDescriptor",
    "TopologyParticipant",
    "validate_runtime_binding",
    "validate_runtime_bindings",
    "weight_placement_from_json",
    "weight_placement_to_json",
    "StoredFragment",
    "StoredFragmentSnapshot",
    "StoredManifestIdentity",
    "WeightManifest",
    "StoredWeightManifest",
    "LogicalTransferPlan",
    "LogicalTransferOperation",
    "PipelineRouteGroup",
    "PlacementExecutorPlan",
    "PlanningLimits",
    "TransferRegion",
    "ResourceKind",
    "plan_placement_transfer",
    "plan_placement_transfer_to_local_target",
    "plan_stored_transfer_to_target_placement",
]
