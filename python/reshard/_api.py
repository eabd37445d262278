"""The three paths over caller tensors: local, store and live."""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, Mapping, Optional, Union

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
            threads: int = 1, subset: bool = False) -> Report:
    """Moves the bytes of `source_tensors` into `target_tensors`.

    Both mappings are {participant id: {tensor id: tensor}} or
    {placement fragment id: tensor}. Every participant that owns fragments
    must be given (or only those the plan uses, with ``subset=True``).
    `plan`, from ``reshard.plan(source, target)``, is reused as is: plan once,
    reshard every step. Nothing is written before every check passed.
    """
    src, keep_src = fragment_views(source, source_tensors, "source", False)
    dst, keep_dst = fragment_views(target, target_tensors, "target", True)
    report = _reshard.reshard_buffers(source, src, target, dst, plan=plan,
                                      threads=threads, subset=subset)
    del keep_src, keep_dst
    return Report(report)


class WeightStore:
    """A weight store: immutable revisions uploaded from and loaded into
    caller tensors at any layout.

    ``uri`` is ``fs://DIR`` (or a plain directory path).
    """

    def __init__(self, uri: str, *, key_prefix: str = "weights",
                 namespace: str = "default", chunk_bytes: int = 1 << 20,
                 lease_ttl_seconds: int = 86400,
                 gc_grace_seconds: int = 3600) -> None:
        self._store = _reshard.WeightStore(
            uri, key_prefix=key_prefix, namespace=namespace,
            chunk_bytes=chunk_bytes, lease_ttl_seconds=lease_ttl_seconds,
            gc_grace_seconds=gc_grace_seconds)
        self.uri = uri

    def upload(self, placement: _reshard.WeightPlacementManifest,
               tensors: Mapping) -> _reshard.StoredWeightManifest:
        """Writes every fragment of `placement` from `tensors` and commits
        one revision; returns its manifest (``.manifest_key``). A failure
        aborts the upload: nothing is published."""
        addresses, keep = fragment_views(placement, tensors, "upload source",
                                         False)
        manifest = self._store.upload_buffers(placement, addresses)
        del keep
        return manifest

    def load(self, manifest: Union[str, _reshard.StoredWeightManifest],
             target: _reshard.WeightPlacementManifest,
             tensors: Mapping) -> Report:
        """Reads a committed revision (its manifest key or manifest) straight
        into `tensors` laid out as `target`."""
        addresses, keep = fragment_views(target, tensors, "load target", True)
        report = self._store.load_buffers(manifest, target, addresses)
        del keep
        return Report(report)

    def read_manifest(self, manifest_key: str) -> _reshard.StoredWeightManifest:
        return self._store.read_manifest(manifest_key)

    def ls(self) -> list:
        """Every revision: manifest_key, resource_id, revision, state, ..."""
        return [Report(r) for r in self._store.ls()]

    def verify(self, manifest_key: str) -> Report:
        """Re-reads every byte of a revision against its checksums."""
        return Report(self._store.verify(manifest_key))

    def rm(self, manifest_key: str) -> None:
        """Removes a revision (refused while a load holds a lease)."""
        self._store.rm(manifest_key)

    def gc(self) -> Report:
        """Removes abandoned uploads older than the grace period."""
        return Report(self._store.gc())

    def __repr__(self) -> str:
        return f"WeightStore({self.uri!r})"


class LiveSession:
    """One process's seat in a live reshard between process groups.

    Every process of the session creates one with the same `name`,
    `rendezvous` (a directory or ``fs://DIR`` every process sees), `ranks`
    and placements, and its own `rank`. Each ``update()`` moves the current
    contents of the source tensors this process hosts into the target
    tensors it hosts, over UCX, and returns when every process has finished
    (or raises naming the rank that failed; then no target of this update
    is marked ready). Updates are numbered; every process must call
    ``update()`` the same number of times.
    """

    def __init__(self, rendezvous: str, name: str, *, rank: int, ranks: int,
                 source: _reshard.WeightPlacementManifest,
                 target: _reshard.WeightPlacementManifest,
                 timeout: float = 60.0, protocol: str = "auto",
                 max_in_flight: int = 64, instance_id: Optional[str] = None,
                 ucx_tls: str = "") -> None:
        self.rendezvous = rendezvous
        self.name = name
        self.rank = rank
        self.ranks = ranks
        self.source = source
        self.target = target
        self.timeout = timeout
        self.protocol = protocol
        self.max_in_flight = max_in_flight
        self.instance_id = instance_id or _default_instance()
        self.ucx_tls = ucx_tls
        self.step = 0

    def update(self, sources: Optional[Mapping] = None,
               targets: Optional[Mapping] = None) -> Report:
        """One update: {participant: {tensor id: tensor}} of the source and
        target participants this process hosts.

        The step advances whether or not the update succeeds, so that every
        process stays on the same session key: a process whose own tensors
        are refused records an abort for this step (its peers fail at once,
        naming it) and raises; the next update is a fresh step for all.
        """
        self.step += 1
        session = f"{self.name}.{self.step:06d}"
        try:
            src, keep_src = fragment_views(self.source, sources or {},
                                           "source", False)
            dst, keep_dst = fragment_views(self.target, targets or {},
                                           "target", True)
        except Exception as error:
            _reshard.abort_live(self.rendezvous, session, self.rank,
                                f"rank {self.rank} refused its tensors: "
                                f"{error}")
            raise
        options = dict(instance_id=self.instance_id, generation=self.step,
                       lease_id=f"{self.name}.{self.step}")
        report = _reshard.run_live(
            self.rendezvous, self.source, self.target, src, dst,
            session=session, rank=self.rank, ranks=self.ranks,
            timeout=self.timeout, max_in_flight=self.max_in_flight,
            protocol=self.protocol, options=options, ucx_tls=self.ucx_tls)
        del keep_src, keep_dst
        report["step"] = self.step
        return Report(report)
