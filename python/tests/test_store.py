"""The weight store from Python: upload at one layout, load at another.

``WeightStore("fs://" + dir).upload(...)`` of a source layout filled from
the global element index, then ``.load(...)`` into torch tensors (and numpy
arrays) of other layouts, checked element by element; the maintenance
results (ls, verify, rm, gc) and the stored manifest; a removed revision;
the same revision uploaded twice; and hostile stores (a garbage manifest,
payloads and manifests replaced by symbolic links), which the library lists
as CORRUPT or refuses naming the key, and never follows.
"""

import json
import os
import shutil

import pytest

import reshard
from deadlines import raised_within
from patterns import Buffers, SCENARIO_DIR, load_scenario, split_placement

SCENARIOS = json.loads((SCENARIO_DIR / "expected.json").read_text())["plans"]
PAIRS = ["tp_split_4_to_8", "ep_regroup_2_to_8", "cross_dim_ep2_to_tp2",
         "dp_replicas_dp2tp2_to_dp3tp4", "fp8_weight_scale_tp4_to_tp8",
         "four_axis", "aliases_tied_embeddings", "pp_routing_mod_4_to_2"]


def _pair(name):
    entry = SCENARIOS[name]
    return load_scenario(entry["source"]), load_scenario(entry["target"])


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if not p.is_dir())


def _txn(manifest):
    """The upload transaction of a stored manifest's payloads."""
    txns = {f.object_key.split("/payload/")[1].split("/")[0]
            for f in manifest.fragments}
    assert len(txns) == 1
    return txns.pop()


@pytest.mark.parametrize("lib", ["torch", "numpy"])
@pytest.mark.parametrize("name", PAIRS)
def test_upload_then_load_at_another_layout(name, lib, tmp_path):
    src, dst = _pair(name)
    store = reshard.WeightStore("fs://" + str(tmp_path))
    sources = Buffers(src, lib, fill=True)
    manifest = store.upload(src, sources.by_participant())
    assert isinstance(manifest, reshard.StoredWeightManifest)
    key = (f"weights/default/{src.resource_id}/{src.revision}/"
           f"{src.weight_generation}/manifest")
    assert manifest.manifest_key == key
    assert (manifest.resource_id, manifest.revision,
            manifest.weight_generation, manifest.namespace) == (
        src.resource_id, src.revision, src.weight_generation, "default")
    assert {t.tensor_id for t in manifest.tensors} == \
        {t.tensor_id for t in src.tensors}

    # By key into torch tensors (or numpy arrays) of the target layout.
    targets = Buffers(dst, lib)
    targets.poison(0x00)
    report = store.load(key, dst, targets.by_fragment())
    assert report.bytes == targets.nbytes == SCENARIOS[name]["bytes"]
    # Every chunk read is verified; DP target replicas share reads.
    assert report.chunks_verified > 0 and report.bytes_read > 0
    assert 0 <= report.bytes_copied <= report.bytes
    # Staging within the default limit (64 MiB) plus one chunk (1 MiB).
    assert 0 <= report.staging_bytes <= (64 << 20) + (1 << 20)
    assert report.regions == reshard.plan(manifest, dst).num_regions
    assert targets.mismatch() == ""
    # By manifest, again, into poisoned targets keyed by participant.
    targets.poison(0xFF)
    store.load(manifest, dst, targets.by_participant())
    assert targets.mismatch() == ""
    # And back into the source layout.
    back = Buffers(src, "torch")
    back.poison()
    store.load(key, src, back.by_fragment())
    assert back.mismatch() == ""

    # The stored manifest plans like a placement.
    plan = reshard.plan(manifest, dst)
    assert plan.source_kind == "stored_manifest"
    assert plan.summary["bytes"] == targets.nbytes
    assert plan.target_placement_id == dst.placement_id


def test_maintenance_results(tmp_path):
    src, dst = _pair("dp_replicas_dp2tp2_to_dp3tp4")
    store = reshard.WeightStore(str(tmp_path), key_prefix="ckpt",
                                namespace="team a")
    assert repr(store) == f"WeightStore({str(tmp_path)!r})"
    sources = Buffers(src, "torch", fill=True)
    manifest = store.upload(src, sources.by_fragment())
    key = manifest.manifest_key
    # The namespace is quoted in keys.
    assert key == (f"ckpt/team%20a/{src.resource_id}/{src.revision}/"
                   f"{src.weight_generation}/manifest")
    assert (tmp_path / key).is_file()
    # One DP replica is stored, whatever the DP size.
    replica = sum(t.nbytes for t in src.tensors)
    assert sum(f.nbytes for f in manifest.fragments) == replica
    assert manifest.manifest_digest and manifest.created_at

    listed = store.ls()
    assert listed == [{
        "manifest_key": key, "resource_id": src.resource_id,
        "revision": src.revision, "weight_generation": src.weight_generation,
        "state": "READY", "fragments": len(manifest.fragments),
        "bytes": replica, "leases": 0, "error": ""}]
    assert listed[0].state == "READY"  # attributes too

    verified = store.verify(key)
    assert verified.objects == len(manifest.fragments)
    assert verified.bytes == replica
    assert verified.chunks >= verified.objects

    again = store.read_manifest(key)
    assert again.to_json() == manifest.to_json()
    assert reshard.StoredWeightManifest.from_json(
        manifest.to_json()).to_json() == manifest.to_json()
    for f in manifest.fragments:
        assert f.object_key.startswith(key[:-len("manifest")] + "payload/")
        assert f.object_offset == 0 and f.fragment_id == f.stored_fragment_id

    nothing = store.gc()
    assert nothing == {"keys_removed": 0, "bytes_removed": 0,
                       "transactions_removed": [], "temporaries_removed": 0,
                       "transactions_completed": [], "skipped": []}

    store.rm(key)
    assert store.ls() == []
    assert _files(tmp_path) == []
    with pytest.raises(reshard.NotFoundError) as e:
        store.load(key, dst, Buffers(dst, "torch").by_fragment())
    assert str(e.value) == f"no published weight revision {key}"
    assert isinstance(e.value, LookupError)
    with pytest.raises(reshard.FailedPreconditionError) as e:
        store.load(manifest, dst, Buffers(dst, "torch").by_fragment())
    assert str(e.value) == f"weight manifest is not committed: {key}"
    with pytest.raises(reshard.NotFoundError) as e:
        store.verify(key)
    assert key in str(e.value)
    with pytest.raises(reshard.NotFoundError):
        store.rm(key)
    with pytest.raises(reshard.NotFoundError):
        store.read_manifest(key)


def test_same_upload_twice(tmp_path):
    src, dst = _pair("tp_split_4_to_8")
    store = reshard.WeightStore("fs://" + str(tmp_path))
    sources = Buffers(src, "torch", fill=True)
    first = store.upload(src, sources.by_fragment())
    before = _files(tmp_path)
    # Another upload of the same revision: another transaction, another
    # manifest; the first one published wins and the loser's payloads go.
    with pytest.raises(reshard.AlreadyExistsError) as e:
        store.upload(src, sources.by_fragment())
    assert str(e.value) == f"conflicting weight revision: {first.manifest_key}"
    assert store.read_manifest(first.manifest_key).to_json() == first.to_json()
    [entry] = store.ls()
    assert entry.state == "READY" and entry.manifest_key == first.manifest_key
    store.verify(first.manifest_key)
    targets = Buffers(dst, "torch")
    store.load(first.manifest_key, dst, targets.by_fragment())
    assert targets.mismatch() == ""
    winner = _txn(first)
    leftover = [f for f in _files(tmp_path) if f not in before]
    assert leftover and all(winner not in f and "/transactions/" in f
                            for f in leftover)
    # gc collects the loser's transaction records, and only them.
    report = store.gc()
    assert len(report.transactions_removed) == 1
    assert winner not in report.transactions_removed[0]
    assert report.keys_removed == len(leftover)
    assert report.skipped == []
    assert _files(tmp_path) == before
    assert store.gc().keys_removed == 0
    # A new revision of the same placement set is its own revision.
    src2 = split_placement("w", (8, 6), "uint8", 1, 2, 0, "set",
                           revision="r2")
    src1 = split_placement("w", (8, 6), "uint8", 1, 2, 0, "set",
                           revision="r1")
    k1 = store.upload(src1, Buffers(src1, "numpy", fill=True).by_fragment())
    k2 = store.upload(src2, Buffers(src2, "numpy", fill=True).by_fragment())
    assert k1.manifest_key != k2.manifest_key
    assert [r.revision for r in store.ls() if r.resource_id == "split-model"] \
        == ["r1", "r2"]


def _two_revisions(tmp_path):
    store = reshard.WeightStore("fs://" + str(tmp_path))
    layouts = [split_placement("w", (8, 6), "uint8", 1, 2, 0, "set",
                               revision=r) for r in ("r1", "r2")]
    manifests = [store.upload(p, Buffers(p, "torch", fill=True).by_fragment())
                 for p in layouts]
    # Loads read into the same revision at another layout.
    target = split_placement("w", (8, 6), "uint8", 1, 3, 1, "t",
                             revision="r1")
    linked_target = split_placement("w", (8, 6), "uint8", 1, 3, 1, "t",
                                    revision="r2")
    return store, manifests, target, linked_target


def test_garbage_manifest_is_listed_corrupt(tmp_path):
    store, (good, bad), target, bad_target = _two_revisions(tmp_path)
    (tmp_path / bad.manifest_key).write_bytes(b'{"not": "a manifest"')
    listed = {r.manifest_key: r for r in store.ls()}
    assert listed[good.manifest_key].state == "READY"
    corrupt = listed[bad.manifest_key]
    assert corrupt.state == "CORRUPT"
    assert (corrupt.fragments, corrupt.bytes, corrupt.resource_id) == \
        (0, 0, "")
    prefix = f"corrupt manifest {bad.manifest_key}: invalid JSON"
    assert corrupt.error.startswith(prefix)
    targets = Buffers(target, "torch")
    with pytest.raises(reshard.DataLossError) as e:
        store.load(bad.manifest_key, bad_target,
                   Buffers(bad_target, "torch").by_fragment())
    assert str(e.value) == corrupt.error
    with pytest.raises(reshard.DataLossError) as e:
        store.verify(bad.manifest_key)
    assert str(e.value).startswith(prefix)
    gc = store.gc()
    assert gc.skipped == [{"key": bad.manifest_key, "error": corrupt.error}]
    assert gc.keys_removed == 0
    # The good revision is untouched; rm removes the corrupt one.
    store.load(good.manifest_key, target, targets.by_fragment())
    assert targets.mismatch() == ""
    store.rm(bad.manifest_key)
    assert [r.manifest_key for r in store.ls()] == [good.manifest_key]
    assert all("/r2/" not in f for f in _files(tmp_path))


def test_payload_behind_a_symbolic_link_is_never_followed(tmp_path):
    store_dir = tmp_path / "store"
    outside = tmp_path / "outside"
    outside.mkdir()
    store, (good, linked), target, linked_target = _two_revisions(store_dir)
    payload = store_dir / linked.fragments[0].object_key
    copy = outside / "payload-copy"
    shutil.copy(payload, copy)
    content = copy.read_bytes()
    payload.unlink()
    os.symlink(copy, payload)
    message = (f"{linked.fragments[0].object_key} is a symbolic link (a store "
               "never follows links)")
    with pytest.raises(reshard.DataLossError) as e:
        store.load(linked.manifest_key, linked_target,
                   Buffers(linked_target, "torch").by_fragment())
    assert str(e.value).endswith(message)
    assert linked.fragments[0].stored_fragment_id in str(e.value)
    with pytest.raises(reshard.DataLossError) as e:
        store.verify(linked.manifest_key)
    assert str(e.value).endswith(message)
    store.verify(good.manifest_key)
    assert store.gc().keys_removed == 0
    store.rm(linked.manifest_key)
    assert copy.read_bytes() == content  # the link's target is left alone
    assert [r.manifest_key for r in store.ls()] == [good.manifest_key]
    targets = Buffers(target, "torch")
    store.load(good.manifest_key, target, targets.by_fragment())
    assert targets.mismatch() == ""


def test_manifest_that_is_a_symbolic_link_is_corrupt(tmp_path):
    store_dir = tmp_path / "store"
    outside = tmp_path / "outside"
    outside.mkdir()
    store, (good, linked), target, linked_target = _two_revisions(store_dir)
    manifest = store_dir / linked.manifest_key
    copy = outside / "manifest-copy"
    shutil.copy(manifest, copy)
    manifest.unlink()
    os.symlink(copy, manifest)
    error = (f"cannot read record {linked.manifest_key}: "
             f"{linked.manifest_key} is a symbolic link (a store never "
             "follows links)")
    listed = {r.manifest_key: r for r in store.ls()}
    assert listed[good.manifest_key].state == "READY"
    assert listed[linked.manifest_key].state == "CORRUPT"
    assert listed[linked.manifest_key].error == error
    with pytest.raises(reshard.DataLossError) as e:
        store.load(linked.manifest_key, linked_target,
                   Buffers(linked_target, "torch").by_fragment())
    assert str(e.value) == error
    store.rm(linked.manifest_key)
    assert copy.is_file()
    assert [r.manifest_key for r in store.ls()] == [good.manifest_key]


def test_store_uri_and_option_refusals(tmp_path):
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.WeightStore("s3://bucket")
    assert str(e.value) == ('unsupported store URI "s3://bucket" '
                            '(supported: fs://PATH, redis://HOST:PORT, '
                            'unix:///PATH)')
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.WeightStore("")
    assert str(e.value) == 'store URI "" names no directory'
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.WeightStore(str(tmp_path), chunk_bytes=-1)
    assert "WeightStore.chunk_bytes" in str(e.value)
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.WeightStore(str(tmp_path), gc_grace_seconds=True)
    assert str(e.value) == ("WeightStore.gc_grace_seconds must be an integer, "
                            "got bool")


def _at_once(call):
    """The exception `call()` raises within 5 s; fails if it still runs."""
    return raised_within(call, 5)


def test_missing_fs_store_is_not_created_by_reads_and_wait_fails_at_once(
        tmp_path):
    """A mistyped store path: opening it creates nothing, and every read
    (wait included, which used to wait for ever on the directory it had
    created) fails at once with NotFound naming it. The first upload
    creates it, parents and all."""
    src, dst = _pair("tp_split_4_to_8")
    base = tmp_path / "typo"
    path = base / "store"
    store = reshard.WeightStore("fs://" + str(path))
    key = (f"weights/default/{src.resource_id}/{src.revision}/"
           f"{src.weight_generation}/manifest")
    targets = Buffers(dst, "numpy")
    reads = {
        "wait": lambda: store.wait(src.resource_id),
        "wait with a timeout": lambda: store.wait(src.resource_id,
                                                  timeout=60),
        "revisions": lambda: next(store.revisions(src.resource_id)),
        "load": lambda: store.load(key, dst, targets.by_fragment()),
        "read_manifest": lambda: store.read_manifest(key),
        "ls": store.ls,
        "verify": lambda: store.verify(key),
        "rm": lambda: store.rm(key),
        "gc": store.gc,
    }
    for what, call in reads.items():
        error = _at_once(call)
        assert isinstance(error, reshard.NotFoundError), (what, repr(error))
        assert str(error) == f"store directory {path} does not exist", what
        assert not base.exists(), f"{what} created {base}"
    # The options are still checked when the store is opened.
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.WeightStore("fs://" + str(path), chunk_bytes=0)
    assert str(e.value) == ("chunk_bytes, max_range_bytes and "
                            "max_ranges_per_request must be positive")
    assert not base.exists()
    # The first write creates it; the same object then reads it.
    manifest = store.upload(src, Buffers(src, "numpy", fill=True)
                            .by_participant())
    assert manifest.manifest_key == key and path.is_dir()
    assert store.wait(src.resource_id, timeout=5).manifest_key == key
    targets.poison(0x00)
    store.load(key, dst, targets.by_fragment())
    assert targets.mismatch() == ""
