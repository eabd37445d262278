"""The three paths over caller tensors: local, store and live."""

from __future__ import annotations

import math
import numbers
import os
import socket
import threading
from typing import Any, Callable, Dict, Mapping, Optional, Union

from reshard import _reshard
from reshard._tensors import fragment_views


class Report(dict):
    """A report: a dict whose keys are also attributes (``report.bytes``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _default_instance() -> str:
    # One address space per process; record-key safe.
    host = "".join(c if c.isalnum() or c in "._-" else "-"
                   for c in socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def bind_tensors(placement: _reshard.WeightPlacementManifest,
                 participant_id: str, tensors: Mapping, *,
                 instance_id: str = "local", generation: int = 1,
                 lease_id: str = "local-lease", worker_id: str = "local",
                 writable: bool = True
                 ) -> _reshard.WeightRuntimeBindingManifest:
    """The validated runtime binding of one participant's tensors.

    `tensors` maps the participant's tensor ids (or placement fragment ids)
    to tensors. The tensors must stay alive and in place while the binding
    is used.
    """
    addresses, _ = fragment_views(placement, {participant_id: tensors},
                                  "binding", writable)
    options = dict(instance_id=instance_id, generation=generation,
                   lease_id=lease_id, worker_id=worker_id)
    return _reshard.bind_buffers(placement, participant_id,
                                 addresses.get(participant_id, {}), options)


def reshard(source: _reshard.WeightPlacementManifest, source_tensors: Mapping,
            target: _reshard.WeightPlacementManifest, target_tensors: Mapping,
            *, plan: Optional[_reshard.LogicalTransferPlan] = None,
            threads: int = 1, subset: bool = False, convert: bool = False,
            fp8_block: Optional[tuple] = None) -> Report:
    """Moves the bytes of `source_tensors` into `target_tensors`.

    Both mappings are {participant id: {tensor id: tensor}} or
    {placement fragment id: tensor}. Every participant that owns fragments
    must be given (or only those the plan uses, with ``subset=True``).
    `plan`, from ``reshard.plan(source, target)``, is reused as is: plan once,
    reshard every step. Nothing is written before every check passed.
    With ``convert=True`` tensors whose dtype differs convert
    (docs/conversion.md; ``fp8_block=(rows, cols)``, default (128, 128)).
    """
    src, keep_src = fragment_views(source, source_tensors, "source", False)
    dst, keep_dst = fragment_views(target, target_tensors, "target", True)
    report = _reshard.reshard_buffers(source, src, target, dst, plan=plan,
                                      threads=threads, subset=subset,
                                      convert=convert, fp8_block=fp8_block)
    del keep_src, keep_dst
    return Report(report)


# The longest timeout of a wait for other processes (a live session, an
# upload from several processes; the native bound).
WEEK_SECONDS = 7 * 86400.0


def check_seconds(who: str, name: str, value, *, minimum: float = 0.0,
                  above_minimum: bool = False,
                  maximum: Optional[float] = None) -> float:
    """`value`, a finite number of seconds at least `minimum` (above it
    with `above_minimum`, at most `maximum` when given), as a float; else
    ``InvalidArgumentError`` naming `who`'s parameter `name` and the value.
    NaN, the infinities and negative values are always refused: a timeout
    that can never expire is not a timeout."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
        if math.isfinite(seconds) and (
                seconds > minimum if above_minimum else seconds >= minimum
        ) and (maximum is None or seconds <= maximum):
            return seconds
        shown = f"{seconds:g}"
    else:
        shown = repr(value)
    if maximum is not None:
        rule = (f"> {minimum:g} and at most {maximum:g} seconds"
                if above_minimum else
                f"between {minimum:g} and {maximum:g} seconds")
    else:
        rule = (f"a finite number of seconds "
                f"{'>' if above_minimum else '>='} {minimum:g}")
    raise _reshard.InvalidArgumentError(
        f"{who}: {name} must be {rule}, not {shown}")


def check_share_arguments(what: str, noun: str, rank, ranks,
                          progress) -> None:
    """The arguments of a call one process or several make (upload,
    hf.write): rank and ranks together or neither; progress only for one
    process."""
    if (rank is None) != (ranks is None):
        raise _reshard.InvalidArgumentError(
            f"{what}: give both rank and ranks, or neither")
    if progress is not None and ranks is not None:
        raise _reshard.InvalidArgumentError(
            f"{what}: progress is for a one-process {noun} (no ranks)")


class WeightStore:
    """A weight store: immutable revisions uploaded from and loaded into
    caller tensors at any layout.

    ``uri`` is ``fs://DIR`` (or a plain directory path), or a Redis server
    (``redis://HOST:PORT?prefix=P``, ``unix:///PATH``; the password from
    the URI or ``RESHARD_REDIS_PASSWORD``). ``uri`` and ``repr`` never show
    the password.

    Opening never creates a store directory: until the first ``upload``
    creates it (with its parents), every read of an ``fs://`` store whose
    directory does not exist (``wait``, ``load``, ``list``, ...) raises
    ``NotFoundError`` ("store directory PATH does not exist") at once.
    """

    def __init__(self, uri: str, *, key_prefix: str = "weights",
                 namespace: str = "default", chunk_bytes: int = 1 << 20,
                 lease_ttl_seconds: int = 86400,
                 gc_grace_seconds: int = 3600) -> None:
        self._store = _reshard.WeightStore(
            uri, key_prefix=key_prefix, namespace=namespace,
            chunk_bytes=chunk_bytes, lease_ttl_seconds=lease_ttl_seconds,
            gc_grace_seconds=gc_grace_seconds)
        # Never the password (repr, logs): the store keeps the real URI.
        self.uri = _reshard.redact_uri(uri)
        # Manifest key -> (order, report) of the revisions read by wait().
        self._seen: Dict[str, tuple] = {}

    def upload(self, placement: _reshard.WeightPlacementManifest,
               tensors: Mapping, *, rank: Optional[int] = None,
               ranks: Optional[int] = None, upload_id: Optional[str] = None,
               timeout: float = 600.0, progress=None,
               quantize_to: Optional[_reshard.WeightPlacementManifest] = None,
               fp8_block: Optional[tuple] = None
               ) -> _reshard.StoredWeightManifest:
        """Writes every fragment of `placement` from `tensors` and commits
        one revision; returns its manifest (``.manifest_key``). A failure
        aborts the upload: nothing is published.

        With `rank` and `ranks`, the revision is uploaded by `ranks`
        processes together, each passing its own share of the tensors (the
        participants it holds; none is fine) and the same `placement` and
        `upload_id` (default: the placement's revision; a retry after a
        failure needs a new one). The processes meet in the store: rank 0
        plans from every rank's bindings and commits once every rank wrote
        its fragments; every process returns the committed manifest. A
        process that fails makes the others fail naming it; a process that
        never arrives makes the others raise ``UnavailableError`` after
        `timeout` seconds, naming the ranks waited for.

        `progress(done, total)`, if given, is called with the bytes
        written so far, from this thread with the GIL held, at most a few
        hundred times plus ten a second (first with 0, last with total);
        an exception it raises is raised once the upload has finished
        (the revision is committed). Not with `ranks`.

        With `quantize_to` (a placement holding tensors of `placement` in
        block FP8 with their ``weight_scale_inv``, e.g. ``hf.layout(...,
        quantize="fp8")``), those tensors quantize here, before upload,
        wherever this process's fragments hold whole ``fp8_block`` blocks:
        the revision holds `placement`'s geometry with them in FP8 and
        their float32 scales (about half the bytes of bfloat16), bit for
        bit as a converting load would compute them (docs/conversion.md).

        `timeout` is between 0 and 604800 seconds (a week; NaN, the
        infinities and negative values are refused, with `ranks` or not).
        """
        timeout = check_seconds("WeightStore.upload", "timeout", timeout,
                                maximum=WEEK_SECONDS)
        check_share_arguments("upload", "upload", rank, ranks, progress)
        addresses, keep = fragment_views(placement, tensors, "upload source",
                                         False)
        try:
            if ranks is None:
                return self._store.upload_buffers(
                    placement, addresses, progress=progress,
                    quantize_to=quantize_to, fp8_block=fp8_block)
            options = dict(instance_id=_default_instance(),
                           lease_id="upload", worker_id=f"rank-{rank}")
            return self._store.upload_share_buffers(
                placement, addresses,
                upload_id=upload_id or placement.revision, rank=rank,
                ranks=ranks, timeout_ms=int(timeout * 1000), options=options,
                quantize_to=quantize_to, fp8_block=fp8_block)
        except _reshard.FailedPreconditionError as error:
            if ranks is None and "no complete generation-consistent" in str(
                    error):
                raise _reshard.FailedPreconditionError(
                    f"{error}; a process holding only its share uploads it "
                    "with upload(..., rank=r, ranks=n)") from None
            raise
        finally:
            del keep

    def load(self, manifest: Union[str, _reshard.StoredWeightManifest],
             target: _reshard.WeightPlacementManifest,
             tensors: Mapping, *, progress=None, convert: bool = False,
             fp8_block: Optional[tuple] = None) -> Report:
        """Reads a committed revision (its manifest key or manifest) straight
        into `tensors` laid out as `target`. `progress(done, total)` as in
        ``upload``: the target bytes delivered so far. With ``convert=True``
        target tensors whose dtype differs from the revision's convert
        (docs/conversion.md; ``fp8_block=(rows, cols)``)."""
        addresses, keep = fragment_views(target, tensors, "load target", True)
        report = self._store.load_buffers(manifest, target, addresses,
                                          progress=progress, convert=convert,
                                          fp8_block=fp8_block)
        del keep
        return Report(report)

    def read_manifest(self, manifest_key: str) -> _reshard.StoredWeightManifest:
        return self._store.read_manifest(manifest_key)

    def _newest(self, resource: str, after) -> Optional[Report]:
        """The newest published revision of `resource` newer than `after`
        (a (weight_generation, created_at) key), or None."""
        best = None
        for key in self._store.manifest_keys(resource):
            seen = self._seen.get(key)
            if seen is None:
                try:
                    m = self._store.read_manifest(key)
                except _reshard.NotFoundError:  # removed meanwhile
                    continue
                seen = self._seen[key] = (
                    (m.weight_generation, m.created_at),
                    Report(manifest_key=key, resource_id=m.resource_id,
                           revision=m.revision,
                           weight_generation=m.weight_generation,
                           created_at=m.created_at, manifest=m))
            order, info = seen
            if (after is None or order > after) and (
                    best is None or order > best[0]):
                best = (order, info)
        return None if best is None else best[1]

    def _order_of(self, resource: str, revision) -> Optional[tuple]:
        if revision is None:
            return None
        if isinstance(revision, _reshard.StoredWeightManifest):
            return (revision.weight_generation, revision.created_at)
        if isinstance(revision, Mapping):
            return (revision["weight_generation"], revision["created_at"])
        self._newest(resource, None)  # reads every manifest not seen yet
        orders = [order for key, (order, info) in self._seen.items()
                  if info.resource_id == resource and (
                      info.revision == revision or key == revision)]
        if not orders:
            raise _reshard.NotFoundError(
                f"no published revision {revision!r} of resource "
                f"{resource!r}")
        return max(orders)

    def wait(self, resource: str, revision=None, *,
             timeout: Optional[float] = None,
             poll_interval: float = 0.05) -> Report:
        """Blocks until a revision of `resource` newer than `revision` (a
        revision name, manifest key, ``StoredWeightManifest`` or a report
        of ``wait``; None: any) is published, and returns the newest:
        {manifest_key, resource_id, revision, weight_generation,
        created_at, manifest}. Revisions are ordered by weight generation,
        then commit time (``created_at``, in seconds): give each revision
        a larger weight generation (the step) so that revisions committed
        within one second are ordered too. Raises ``UnavailableError``
        after `timeout` seconds (None: wait forever; otherwise a finite
        number >= 0: NaN, the infinities and negative values are refused,
        as is a `poll_interval` that is not a finite number >= 0). A store
        directory that does not exist is ``NotFoundError`` at once."""
        import time
        if timeout is not None:
            timeout = check_seconds("WeightStore.wait", "timeout", timeout)
        poll_interval = check_seconds("WeightStore.wait", "poll_interval",
                                      poll_interval)
        after = self._order_of(resource, revision)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._newest(resource, after)
            if found is not None:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise _reshard.UnavailableError(
                    f"timed out after {timeout:g} s waiting for a revision "
                    f"of {resource!r} newer than "
                    f"{'none' if revision is None else revision!r} in "
                    f"{self.uri}")
            time.sleep(poll_interval)

    def revisions(self, resource: str, revision=None, *,
                  timeout: Optional[float] = None,
                  poll_interval: float = 0.05):
        """Yields each newer revision of `resource` as it is published
        (``wait`` in a loop from `revision`); a revision overtaken by a
        newer one before it was seen is skipped. `timeout` bounds each
        wait (checked as by ``wait``, at this call)."""
        if timeout is not None:
            check_seconds("WeightStore.revisions", "timeout", timeout)
        check_seconds("WeightStore.revisions", "poll_interval", poll_interval)
        return self._revisions(resource, revision, timeout, poll_interval)

    def _revisions(self, resource: str, revision, timeout, poll_interval):
        while True:
            found = self.wait(resource, revision, timeout=timeout,
                              poll_interval=poll_interval)
            yield found
            revision = found

    def list(self) -> list:
        """Every revision: manifest_key, resource_id, revision, state, ...
        (C++ ``WeightStore::List``; ``ls`` is another name, as the CLI's
        ``store ls``)."""
        return [Report(r) for r in self._store.ls()]

    ls = list

    def verify(self, manifest_key: str) -> Report:
        """Re-reads every byte of a revision against its checksums."""
        return Report(self._store.verify(manifest_key))

    def remove(self, manifest_key: str) -> None:
        """Removes a revision (refused while a load holds a lease; C++
        ``WeightStore::Remove``; ``rm`` is another name, as the CLI's
        ``store rm``)."""
        self._store.rm(manifest_key)

    rm = remove

    def gc(self) -> Report:
        """Removes abandoned uploads older than the grace period."""
        return Report(self._store.gc())

    def __repr__(self) -> str:
        return f"WeightStore({self.uri!r})"


# The longest version tag (live.h, kMaxVersionTagBytes).
MAX_VERSION_TAG_BYTES = 256


def _checked_tag(tag: Optional[str]) -> str:
    """`tag` ('' for None) when the library takes it as a version tag (at
    most MAX_VERSION_TAG_BYTES of UTF-8, no control characters), else
    ``InvalidArgumentError`` naming the rule it breaks."""
    if tag is None:
        return ""
    if not isinstance(tag, str):
        raise _reshard.InvalidArgumentError(
            f"LiveSession.update: tag must be a str, not {type(tag).__name__}")
    try:
        data = tag.encode("utf-8")
    except UnicodeEncodeError:
        raise _reshard.InvalidArgumentError(
            "LiveSession.update: version tag is not valid UTF-8") from None
    if len(data) > MAX_VERSION_TAG_BYTES:
        raise _reshard.InvalidArgumentError(
            f"LiveSession.update: version tag of {len(data)} bytes (at most "
            f"{MAX_VERSION_TAG_BYTES})")
    for i, c in enumerate(data):
        if c < 0x20 or c == 0x7F:
            raise _reshard.InvalidArgumentError(
                "LiveSession.update: version tag holds control character "
                f"{c} at byte {i}")
    return tag


class LiveSession:
    """One process's seat in a standing live session between process groups.

    Every process of the session creates one with the same `session` key
    (``name``, positional, is its older name),
    `rendezvous` (a directory or ``fs://DIR`` every process sees), `ranks`
    and placements, and its own `rank`. The first ``update()`` opens the
    session (publishes, plans, binds and connects once); each ``update()``
    then moves the current contents of the source tensors this process
    hosts into the target tensors it hosts, over the peer exchange
    `exchange` (``"ucx"`` by default; ``reshard.registered_exchanges()``
    lists them), and returns when
    every process has finished, or raises naming the rank that failed (no
    target of that update is marked ready). Tensors that moved since the
    previous update are rebound (targets always; sources only when the
    session was opened with ``movable_sources=True``, on one host and across
    hosts alike).
    Every process must call ``update()`` the same number of times; use the
    session as a context manager, or call ``close()``.

    Every region a process receives is checked against the hash its source
    computed over the bytes it sent (``verify=True``, the default; the
    report's ``verified_regions``). An update that fails before any byte
    moved or after every byte arrived (a region that differs, refused
    tensors, a refused fence) fails alike on every process and leaves the
    session usable: shadow targets still serve the last good update and the
    next ``update()`` runs on the same connections. An update that fails in
    the middle of the exchange ends the native session on the processes
    with operations in flight (``UncertainOutcomeError``: the buffers must
    not be reused; such a process must leave, and a new one may take its
    place with ``rejoin=True``); a process whose native session ended
    otherwise opens a fresh one (``<name>.<attempt>``) at its next
    ``update()``.

    Each successful update publishes a version (``version``: generation,
    source_placement_id, tag, digest), passed to ``on_version`` on the
    processes hosting targets once they hold it.
    """

    def __init__(self, rendezvous: str, name: Optional[str] = None, *,
                 session: Optional[str] = None, rank: int, ranks: int,
                 source: _reshard.WeightPlacementManifest,
                 target: _reshard.WeightPlacementManifest,
                 timeout: float = 60.0, protocol: str = "auto",
                 max_in_flight: int = 64, instance_id: Optional[str] = None,
                 exchange: str = "ucx",
                 exchange_options: Optional[Mapping] = None,
                 ucx_tls: str = "", shadow_targets: bool = False,
                 movable_sources: bool = False,
                 heartbeat_interval: float = 0.2,
                 peer_timeout: float = 1.5, convert: bool = False,
                 fp8_block: Optional[tuple] = None,
                 delta: bool = False, declare_maps: Any = None,
                 expect_maps: Any = None, verify: bool = True,
                 rejoin_timeout: float = 30.0, rejoin: bool = False,
                 on_version: Optional[Callable[[Report], Any]] = None,
                 corrupt_received_in_update: int = 0,
                 device_staging: str = "pipeline",
                 device_staging_bytes: int = 256 << 20) -> None:
        # Checked here, before anything is opened: a timeout that can never
        # expire (NaN, infinite) or is negative is refused at once.
        timeout = check_seconds("LiveSession", "timeout", timeout,
                                above_minimum=True, maximum=WEEK_SECONDS)
        peer_timeout = check_seconds("LiveSession", "peer_timeout",
                                     peer_timeout, maximum=3600.0)
        rejoin_timeout = check_seconds("LiveSession", "rejoin_timeout",
                                       rejoin_timeout, maximum=WEEK_SECONDS)
        if on_version is not None and not callable(on_version):
            raise _reshard.InvalidArgumentError(
                "LiveSession.on_version must be a callable (version) or "
                f"None, not {type(on_version).__name__}")
        # `session` is the library's name (LiveSessionOptions::session, the
        # CLI's --session); `name`, positional, is kept for callers of the
        # first release. One of them, not both.
        if (name is None) == (session is None):
            raise _reshard.InvalidArgumentError(
                "LiveSession: give the session's key as session= (or name=, "
                "its older name), once")
        self.rendezvous = rendezvous
        self.session = session if session is not None else name
        self.name = self.session
        self.rank = rank
        self.ranks = ranks
        self.source = source
        self.target = target
        self.timeout = timeout
        self.protocol = protocol
        self.max_in_flight = max_in_flight
        self.instance_id = instance_id or _default_instance()
        # The peer exchange and its own settings by name (as its backend
        # states them: for "ucx", tls, net_devices, shm_segment_bytes,
        # error_handling). ucx_tls="T" is another name for
        # exchange_options={"tls": "T"} (kept for callers of the first
        # release).
        if exchange not in _reshard.registered_exchanges():
            raise _reshard.InvalidArgumentError(
                f"LiveSession.exchange: unknown peer exchange {exchange!r} "
                f"(registered: {', '.join(_reshard.registered_exchanges())})")
        self.exchange = exchange
        self.exchange_options = dict(exchange_options or {})
        if ucx_tls:
            self.exchange_options.setdefault("tls", ucx_tls)
        self.ucx_tls = ucx_tls
        # Receive into shadow buffers, flipped into the targets after the
        # world barrier: a failed update leaves the targets untouched (as
        # many bytes again as this process's targets, one copy per update).
        self.shadow_targets = shadow_targets
        # Source tensors may move between updates (rebound; the session
        # then pushes, also on one host). Without it a moved source is
        # refused, on one host and across hosts alike.
        self.movable_sources = movable_sources
        # Liveness: a process whose heartbeat (every heartbeat_interval
        # seconds, from a native thread) stands still for peer_timeout
        # seconds is named by the others; 0 turns heartbeats off.
        self.heartbeat_interval = heartbeat_interval
        self.peer_timeout = peer_timeout
        # Tensors whose dtype differs convert (docs/conversion.md): FP8
        # targets quantize at the source where its tensors hold whole
        # fp8_block blocks (FP8 travels), the rest at the target. Every
        # process sets the same; converted tensors must be contiguous.
        self.convert = convert
        self.fp8_block = fp8_block
        # Delta updates (docs/live.md): after the first update only the
        # changed elements travel; every process sets the same. Push only.
        self.delta = delta
        # Parameter-map fingerprints (docs/engines.md): declare_maps, the
        # reshard.engines.EngineLayout this process's target tensors are
        # the parameters of (their maps are declared at open); expect_maps,
        # the layout the targets of the other processes must have declared
        # (a map of another engine release is refused at open, naming the
        # first differing parameter, before anything moves).
        for what, value in (("declare_maps", declare_maps),
                            ("expect_maps", expect_maps)):
            if value is not None and not hasattr(value, "declare"):
                raise _reshard.InvalidArgumentError(
                    f"LiveSession.{what} must be a "
                    "reshard.engines.EngineLayout, not "
                    f"{type(value).__name__}")
        self.declare_maps = declare_maps
        self.expect_maps = expect_maps
        # Verified on arrival (docs/live.md, "When things fail"): every
        # region received is checked against its source's hash; every
        # process sets the same.
        self.verify = verify
        # A process found dead is waited for this long to rejoin before
        # an update fails; rejoin=True makes this process take the place
        # of `rank` in the session already open under `session`.
        self.rejoin_timeout = rejoin_timeout
        self.rejoin = rejoin
        # Called with the version (a Report) on the processes hosting
        # targets after each successful update, on the thread that called
        # update(); an exception it raises is raised by that update() once
        # the update is done (it succeeded: `version` names it).
        self.on_version = on_version
        # Fault injection, for tests only: in the update at this step this
        # process flips one byte of the first region it received from
        # another process after it arrived (0: never).
        self.corrupt_received_in_update = corrupt_received_in_update
        # CUDA tensors over an exchange that moves host memory only
        # (docs/gpu.md): "pipeline" stages them through at most
        # device_staging_bytes of pinned host memory in 4 MiB chunks,
        # "mirror" mirrors each whole (at most device_staging_bytes in all).
        self.device_staging = device_staging
        self.device_staging_bytes = device_staging_bytes
        self._version = None
        self._busy = threading.Lock()
        self.step = 0
        self.attempt = 0
        self.open_seconds = None
        self._native = None
        self._addresses = None
        self._uncertain = False

    @property
    def session_key(self) -> str:
        """The rendezvous key of the native session now (or next) open."""
        return f"{self.name}.{max(self.attempt, 1):06d}"

    @property
    def version(self) -> Optional[Report]:
        """The weights this process's targets hold since the last successful
        update: generation, source_placement_id, tag and digest (an int, 0
        without verification); None before the first. A failed update
        leaves it as it was."""
        if self._native is not None:
            found = self._native.version
            if found is not None:
                self._version = Report(found)
        return self._version

    @property
    def usable(self) -> bool:
        """Whether update() may be called: not closed, and no update left
        operations of this process in flight (a session that ended
        otherwise is reopened by the next update())."""
        return not self._uncertain and (self._native is None or
                                        self._native.usable)

    @property
    def connections(self) -> int:
        """Connections the open native session's exchange made: one per peer
        at open, one more per reconnection to a process that rejoined (0
        before the first update)."""
        return 0 if self._native is None else self._native.connections

    @property
    def rejoins(self) -> int:
        """Processes that rejoined the open native session since this one
        opened it."""
        return 0 if self._native is None else self._native.rejoins

    def _rejoin_attempt(self) -> int:
        """The attempt of the native session `rejoin` takes a place in: the
        latest ``<name>.<attempt>`` with records in the rendezvous."""
        prefix = f"{self.name}."
        found = 0
        for key in _reshard.Rendezvous(self.rendezvous).list(prefix):
            attempt = key[len(prefix):].split("/", 1)[0]
            if len(attempt) == 6 and attempt.isdigit():
                found = max(found, int(attempt))
        if not found:
            raise _reshard.NotFoundError(
                f"live session {self.name}: rejoin=True, but no session "
                f"{self.name}.<attempt> has records in {self.rendezvous}")
        return found

    def _open(self, src, dst) -> None:
        rejoin = self.rejoin and self.attempt == 0
        self.attempt = self._rejoin_attempt() if rejoin else self.attempt + 1
        options = dict(instance_id=self.instance_id, generation=1,
                       lease_id=f"{self.session_key}")
        declaration = ""
        if self.declare_maps is not None and dst:
            declaration = self.declare_maps.declare(sorted(dst))
        expected = None
        if self.expect_maps is not None:
            expected = (self.expect_maps.placement, self.expect_maps._maps)
        self._native = _reshard.StandingSession(
            self.rendezvous, self.source, self.target, src, dst,
            session=self.session_key, rank=self.rank, ranks=self.ranks,
            timeout=self.timeout, max_in_flight=self.max_in_flight,
            protocol=self.protocol, options=options, exchange=self.exchange,
            exchange_options=self.exchange_options,
            shadow_targets=self.shadow_targets,
            movable_sources=self.movable_sources,
            heartbeat_interval=self.heartbeat_interval,
            peer_timeout=self.peer_timeout, convert=self.convert,
            fp8_block=self.fp8_block, delta=self.delta,
            target_declaration=declaration, expected_target_maps=expected,
            verify=self.verify, rejoin_timeout=self.rejoin_timeout,
            rejoin=rejoin, on_version=self._version_callback(),
            corrupt_received_in_update=self.corrupt_received_in_update,
            device_staging=self.device_staging,
            device_staging_bytes=self.device_staging_bytes)
        self.open_seconds = self._native.open_seconds
        # delta: host bytes of this process's snapshot of what it sends.
        self.delta_snapshot_bytes = self._native.delta_snapshot_bytes
        self._addresses = (src, dst)

    def update(self, sources: Optional[Mapping] = None,
               targets: Optional[Mapping] = None, *,
               tag: Optional[str] = None, step: Optional[int] = None
               ) -> Report:
        """One update: {participant: {tensor id: tensor}} of the source and
        target participants this process hosts.

        `tag` (at most 256 bytes of UTF-8, no control characters; for
        example the trainer step) goes into the version the update
        publishes; processes that pass one must pass the same (usually the
        sources pass it and the targets none). A tag refused here raises
        ``InvalidArgumentError`` before anything happens (the step does not
        advance). `step` is the update's generation, by default the
        previous step + 1: a failed update may be retried at its step, and
        a process that rejoined passes the step the others run next.

        The step advances whether or not the update succeeds, so that every
        process stays in step: a process whose own tensors are refused
        fails that update on every process (its peers fail at once, naming
        it), raises, and the session goes on.
        One update at a time: a call while another thread's update() runs
        on this object is refused.
        """
        if not self._busy.acquire(blocking=False):
            raise _reshard.FailedPreconditionError(
                f"live session {self.name}: update() is already running in "
                "another thread; updates of one session are sequential")
        try:
            return self._update(sources, targets, _checked_tag(tag), step)
        finally:
            self._busy.release()

    def _version_callback(self):
        if self.on_version is None:
            return None
        on_version = self.on_version
        return lambda version: on_version(Report(version))

    def _refused(self, error: Exception) -> None:
        """This process's own tensors were refused for this step: the
        update fails on every process, naming it."""
        reason = f"rank {self.rank} refused its tensors: {error}"
        if self._native is None:
            # Not open yet: the others' open fails naming this process,
            # and every process opens afresh at the next step.
            self.attempt += 1
            _reshard.abort_live(self.rendezvous, self.session_key,
                                self.rank, reason)
            return
        try:
            self._native.refuse(self.step, reason)
        except _reshard.UncertainOutcomeError:  # pragma: no cover
            self._uncertain = True
        except _reshard.Error:
            pass  # the update's failure, expected
        if not self._native.usable:
            self._native = None

    def _update(self, sources: Optional[Mapping],
                targets: Optional[Mapping], tag: str,
                step: Optional[int]) -> Report:
        if self._uncertain:
            raise _reshard.FailedPreconditionError(
                f"live session {self.name}: an earlier update's outcome was "
                "uncertain; its buffers may still be in use")
        self.step = self.step + 1 if step is None else step
        try:
            src, keep_src = fragment_views(self.source, sources or {},
                                           "source", False)
            dst, keep_dst = fragment_views(self.target, targets or {},
                                           "target", True)
        except Exception as error:
            self._refused(error)
            raise
        try:
            if self._native is None:
                self._open(src, dst)
                report = self._native.update(self.step, tag=tag)
            elif (src, dst) != self._addresses:
                report = self._native.update(self.step, src, dst, tag=tag)
                self._addresses = (src, dst)
            else:
                report = self._native.update(self.step, tag=tag)
        except _reshard.UncertainOutcomeError:
            self._uncertain = True
            raise
        except _reshard.Error:
            # A failure before any byte moved or after every byte arrived
            # leaves the session usable on every process; else this
            # process opens afresh at its next update.
            if self._native is not None:
                self._version = self.version
                if not self._native.usable:
                    self._native = None
            raise
        finally:
            del keep_src, keep_dst
        report["step"] = self.step
        report["session"] = self.session_key
        return Report(report)

    def close(self) -> None:
        """Closes the session with every process and removes this process's
        rendezvous records (``version`` still names the last update)."""
        if self._native is not None:
            self._version = self.version
            native, self._native = self._native, None
            native.close()

    def __enter__(self) -> "LiveSession":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        elif self._native is not None:
            # Leaving on an error: the peers must not wait for this process.
            native, self._native = self._native, None
            native.abort(f"rank {self.rank} left the session: {exc[1]}")
