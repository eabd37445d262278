"""reshard: move model weights between parallel layouts.

A layout is a placement: every weight fragment as an N-D box of a global
tensor, per participant (``WeightPlacementManifest``, alias ``Placement``).
``plan(source, target)`` intersects two placements; the three paths move
exactly the needed bytes between caller tensors:

* local, in this process: ``reshard(source, source_tensors, target,
  target_tensors)``;
* live, between processes over a peer exchange (UCX by default;
  ``registered_exchanges()``): ``LiveSession``;
* through a store, as immutable revisions: ``WeightStore(uri).upload(...)``
  and ``.load(...)``.

Tensors are torch tensors, numpy arrays or anything with DLPack, the
buffer protocol or ``__array_interface__``, in host memory.
``reshard.torch`` builds placements and bindings from a rank's parameters;
``reshard.hf`` loads Hugging Face checkpoints into any layout's tensors and
writes any layout back as one;
``reshard.compat.mooncake`` offers the prototype's ``mooncake.reshard.weight``
names on this core. Invalid
manifests, plans and tensors raise ``InvalidArgumentError`` (a
``ValueError``); every other failure a subclass of ``reshard.Error``. The
GIL is released while bytes move.
"""

from reshard._reshard import (  # noqa: F401
    AbortedError,
    AlreadyExistsError,
    DataLossError,
    Error,
    FailedPreconditionError,
    GroupedSplitAxis,
    InternalError,
    InvalidArgumentError,
    LogicalTransferPlan,
    NotFoundError,
    OutOfRangeError,
    OwnershipAxis,
    ParallelAxis,
    ParallelRank,
    ParallelTopology,
    PartialSplitAxis,
    PlacementFragment,
    Rendezvous,
    ReplicatedAxis,
    ResourceExhaustedError,
    RuntimeBindingFragment,
    SpanningSplitAxis,
    SplitAxis,
    StoredFragment,
    StoredWeightManifest,
    StoreIOError,
    TensorDescriptor,
    TopologyParticipant,
    UnavailableError,
    UncertainOutcomeError,
    UnimplementedError,
    WeightPlacementManifest,
    WeightPlacementPart,
    WeightRuntimeBindingManifest,
    measure_memcpy_gbps,
    plan,
    registered_exchanges,
    validate_runtime_binding,
    validate_runtime_bindings,
)
from reshard._api import (  # noqa: F401
    LiveSession,
    Report,
    WeightStore,
    bind_tensors,
    reshard,
)

# Short names.
Placement = WeightPlacementManifest
PlacementPart = WeightPlacementPart
Plan = LogicalTransferPlan
RuntimeBinding = WeightRuntimeBindingManifest

__all__ = [n for n in dir() if not n.startswith("_")]
