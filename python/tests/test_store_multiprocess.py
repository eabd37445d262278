"""One revision uploaded by several processes, received by a rollout.

A TP4 trainer spread over two processes (each holding two participants,
its tensors filled from the global element index) uploads each revision
with ``WeightStore.upload(..., rank=r, ranks=2)``; a rollout process,
started first, waits on the store (``WeightStore.wait``), re-targets its
TP8 layout to each revision it receives (``Placement.for_revision``) and
loads it, checking every element. Also: a process uploading only its share
alone is told which replica and participant are missing, and a share
upload whose peer never arrives times out naming it.
"""

import json
import multiprocessing as mp

import pytest

import reshard
from patterns import Buffers, SCENARIO_DIR, load_scenario, split_placement

PAIR = json.loads((SCENARIO_DIR / "expected.json").read_text())["plans"][
    "tp_split_4_to_8"]


def _layouts():
    return load_scenario(PAIR["source"]), load_scenario(PAIR["target"])


def _share(placement, rank, ranks):
    """The participants rank `rank` of `ranks` holds (consecutive)."""
    ids = sorted(p.participant_id for p in placement.parts if p.fragments)
    per = len(ids) // ranks
    return ids[rank * per:(rank + 1) * per]


def _trainer(rank, uri, first_received, results):
    try:
        src, _ = _layouts()
        store = reshard.WeightStore(uri)
        mine = Buffers(src, "torch", fill=True,
                       participants=_share(src, rank, 2))
        keys = []
        for step in (1, 2):
            if step == 2:  # after the rollout received step 1
                assert first_received.wait(60)
            placement = src.for_revision(f"step-{step}", step)
            m = store.upload(placement, mine.by_participant(), rank=rank,
                             ranks=2, timeout=60)
            keys.append(m.manifest_key)
        results.put(("trainer", rank, keys))
    except BaseException as error:  # reported to the test
        results.put(("trainer", rank, f"{type(error).__name__}: {error}"))


def _rollout(uri, first_received, results):
    try:
        _, dst = _layouts()
        store = reshard.WeightStore(uri)
        got = []
        revision = None
        for info in store.revisions(dst.resource_id, timeout=60):
            target = dst.for_revision(info.manifest)
            buffers = Buffers(target, "numpy")
            buffers.poison(0x5A)
            report = store.load(info.manifest_key, target,
                                buffers.by_fragment())
            got.append((info.revision, info.weight_generation,
                        report.bytes == buffers.nbytes, buffers.mismatch()))
            revision = info
            if len(got) == 1:
                first_received.set()
            if len(got) == 2:
                break
        # Nothing newer: a bounded wait says so.
        try:
            store.wait(dst.resource_id, revision, timeout=0.2)
            got.append("no timeout")
        except reshard.UnavailableError as error:
            got.append(str(error))
        results.put(("rollout", 0, got))
    except BaseException as error:
        results.put(("rollout", 0, f"{type(error).__name__}: {error}"))


def test_two_process_trainer_uploads_and_a_waiting_rollout_receives(tmp_path):
    uri = "fs://" + str(tmp_path)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    first_received = ctx.Event()
    procs = [ctx.Process(target=_rollout, args=(uri, first_received,
                                                results))]
    procs += [ctx.Process(target=_trainer, args=(r, uri, first_received,
                                                 results))
              for r in range(2)]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        role, rank, value = results.get(timeout=180)
        out[(role, rank)] = value
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    src, dst = _layouts()
    keys = [f"weights/default/{src.resource_id}/step-{s}/{s}/manifest"
            for s in (1, 2)]
    assert out[("trainer", 0)] == keys, out
    assert out[("trainer", 1)] == keys, out
    rollout = out[("rollout", 0)]
    assert rollout[:2] == [("step-1", 1, True, ""), ("step-2", 2, True, "")], \
        rollout
    assert "timed out after 0.2 s waiting for a revision of" in rollout[2]
    # The share records went with the uploads' transactions: one revision
    # per step, each verifiable.
    store = reshard.WeightStore(uri)
    assert [r.manifest_key for r in store.ls()] == keys
    for key in keys:
        assert store.verify(key).objects > 0


def test_one_process_with_only_its_share_is_told_what_is_missing(tmp_path):
    src, _ = _layouts()
    store = reshard.WeightStore("fs://" + str(tmp_path))
    share = _share(src, 0, 2)
    mine = Buffers(src, "torch", fill=True, participants=share)
    missing = _share(src, 1, 2)[0]
    with pytest.raises(reshard.FailedPreconditionError) as error:
        store.upload(src, mine.by_participant())
    message = str(error.value)
    assert message.startswith(
        "source manifests have no complete generation-consistent DP "
        f"replica: DP replica 0 is missing participant {missing} (unbound; "
        "its first fragment: "), message
    assert message.endswith("a process holding only its share uploads it "
                            "with upload(..., rank=r, ranks=n)"), message
    assert store.ls() == []


def test_share_upload_without_its_peer_times_out_naming_it(tmp_path):
    src, _ = _layouts()
    store = reshard.WeightStore("fs://" + str(tmp_path))
    mine = Buffers(src, "torch", fill=True, participants=_share(src, 0, 2))
    with pytest.raises(reshard.UnavailableError,
                       match=r"timed out after 200 ms waiting for the "
                             r"bindings of rank\(s\) 1"):
        store.upload(src, mine.by_participant(), rank=0, ranks=2,
                     upload_id="alone", timeout=0.2)
    with pytest.raises(reshard.InvalidArgumentError, match="both rank and"):
        store.upload(src, mine.by_participant(), rank=0)


def test_for_revision_keeps_the_layout(tmp_path):
    src, _ = _layouts()
    moved = src.for_revision("step-9", 9)
    assert (moved.revision, moved.weight_generation) == ("step-9", 9)
    assert moved.resource_id == src.resource_id
    assert [f.placement_fragment_id for f in moved.fragments] == \
        [f.placement_fragment_id for f in src.fragments]
    assert moved.placement_id != src.placement_id
    assert src.for_revision("step-9").weight_generation == \
        src.weight_generation
    store = reshard.WeightStore("fs://" + str(tmp_path))
    sources = Buffers(moved, "torch", fill=True)
    stored = store.upload(moved, sources.by_participant())
    # A target at another revision is refused by load; re-targeted, it
    # loads.
    targets = Buffers(src, "torch")
    with pytest.raises(reshard.Error, match="revision mismatch"):
        store.load(stored, src, targets.by_fragment())
    again = src.for_revision(stored)
    targets = Buffers(again, "torch")
    store.load(stored, again, targets.by_fragment())
    assert targets.mismatch() == ""
    other = split_placement("w", (8, 4), "bfloat16", 2, 2, 0, "s",
                            resource_id="other")
    with pytest.raises(reshard.InvalidArgumentError,
                       match="stored revision is of resource"):
        other.for_revision(stored)
