"""LiveSession that survives failure, between two processes over UCX: every
region verified on arrival, a byte flipped after it arrived failing the
update on both processes while shadow targets keep serving the update
before, the session going on without reopening, version tags and digests
both processes agree on, refused tags, and a process killed between
updates whose replacement rejoins the open session (rejoin=True).

Process 0 hosts every source participant (one tensor split in 2 along dim
0), process 1 every target participant (split in 4 along dim 1), so that
every region of the plan crosses between them. Update k fills the sources
with the pattern of each element's global index (patterns.py) plus k, and
every target element is checked after it.
"""
import multiprocessing as mp
import os
import signal

import numpy as np
import pytest

import patterns
import reshard

SHAPE = [64, 256]


def _placements():
    src = patterns.split_placement("w", SHAPE, "bfloat16", 2, 2, 0, "train")
    dst = patterns.split_placement("w", SHAPE, "bfloat16", 2, 4, 1, "serve")
    return src, dst


def _expected(b, k, sparse=False):
    """Fragment `b`'s raw elements in update k: the pattern plus k (with
    `sparse`, only every 50th element by global index moves with k)."""
    idx = patterns.global_index(b.desc.global_shape, b.fragment.global_offset,
                                b.fragment.local_shape)
    bits = patterns.pattern(b.desc, b.fragment.aliases, idx)
    step = np.uint64(k) * (idx % np.uint64(50) == 0) if sparse \
        else np.uint64(k)
    return ((bits + step) % np.uint64(1 << 16)).astype(b.raw.dtype)


def _fill(buffers, k, sparse=False):
    for b in buffers.fragments.values():
        b.raw[...] = _expected(b, k, sparse)


def _mismatch(buffers, k, sparse=False):
    """'' when every element holds update k's value, else the first wrong
    one."""
    for fid, b in buffers.fragments.items():
        want = _expected(b, k, sparse)
        bad = np.argwhere(b.raw != want)
        if bad.size:
            at = tuple(int(i) for i in bad[0])
            return (f"fragment {fid} element {at}: expected {want[at]:#x}, "
                    f"got {b.raw[at]:#x}")
    return ""


def _version(session):
    v = session.version
    return None if v is None else (v.generation, v.source_placement_id,
                                   v.tag, v.digest)


def _seat(rank, rendezvous, updates, results, options):
    """One process: `updates` updates, rank 0 tagging update k "step-k";
    what each returned or raised, and the session's state after it."""
    src, dst = _placements()
    seen = []
    session = reshard.LiveSession(
        rendezvous, session="recover", rank=rank, ranks=2, source=src,
        target=dst, timeout=20, on_version=seen.append,
        **(options.get(rank, {}) | options.get("both", {})))
    buffers = patterns.Buffers(src if rank == 0 else dst, "numpy")
    sources = buffers.by_participant() if rank == 0 else {}
    targets = buffers.by_participant() if rank == 1 else {}
    out = []
    for k in range(1, updates + 1):
        if rank == 0:
            _fill(buffers, k)
        try:
            report = session.update(sources, targets,
                                    tag=f"step-{k}" if rank == 0 else None)
        except reshard.Error as error:
            held = _mismatch(buffers, k - 1) if rank == 1 else ""
            out.append(("failed", k, type(error).__name__, str(error), held))
        else:
            held = _mismatch(buffers, k) if rank == 1 else ""
            out.append(("ok", k, report.verified_regions, held,
                        report.session))
        out.append((_version(session), session.connections, session.usable))
    session.close()
    results.put((rank, out, [(v.generation, v.tag, v.digest) for v in seen]))


def _run(rendezvous, updates, both=None, target=None):
    """Both seats in processes of their own, with LiveSession options
    `both` and, on the target process, `target`; {rank: (outcomes,
    versions on_version saw)}."""
    options = {"both": both or {}, 1: target or {}}
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_seat, args=(r, str(rendezvous), updates,
                                             results, options))
             for r in range(2)]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        rank, outcomes, seen = results.get(timeout=120)
        out[rank] = (outcomes, seen)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_every_update_verifies_every_region_and_publishes_its_version(
        tmp_path):
    """Three tagged updates: the target process verifies every region of
    the plan in each (the source process receives none), every target
    element arrives, and both processes read the same version: the last
    update's generation, tag and digest (on_version saw each one on the
    target process, none on the source process)."""
    src, dst = _placements()
    regions = len(reshard.plan(src, dst).regions())
    assert regions == 8
    out = _run(tmp_path, 3)
    (source_steps, source_seen), (target_steps, target_seen) = out[0], out[1]
    last = target_steps[-1][0]
    assert last[:3] == (3, src.placement_id, "step-3")
    assert last[3] != 0 and source_steps[-1][0] == last
    for k in (1, 2, 3):
        assert source_steps[2 * k - 2] == ("ok", k, 0, "", "recover.000001")
        assert target_steps[2 * k - 2] == ("ok", k, regions, "",
                                           "recover.000001")
        version = target_steps[2 * k - 1][0]
        assert version[:3] == (k, src.placement_id, f"step-{k}")
        assert source_steps[2 * k - 1] == (version, 1, True)
        assert target_steps[2 * k - 1] == (version, 1, True)
        assert target_seen[k - 1] == (k, f"step-{k}", version[3])
    assert len(target_seen) == 3 and source_seen == []
    # Each update's digest is its own: the bytes differ.
    assert len({target_steps[2 * k - 1][0][3] for k in (1, 2, 3)}) == 3


def test_a_flipped_byte_fails_both_processes_and_the_session_goes_on(
        tmp_path):
    """The target process flips one byte of the first region it received
    in update 2, after it arrived: update 2 fails on both processes naming
    region 0 and the bytes that differ; with shadow targets the served
    tensors still hold update 1 and the version still names it; updates 3
    and 4 verify every region on the same session and connection."""
    src, dst = _placements()
    regions = len(reshard.plan(src, dst).regions())
    out = _run(tmp_path, 4, both=dict(shadow_targets=True),
               target=dict(corrupt_received_in_update=2))
    (source_steps, _), (target_steps, target_seen) = out[0], out[1]
    for steps in (source_steps, target_steps):
        state, k, kind, message, held = steps[2]
        assert (state, k, held) == ("failed", 2, "")
        assert "region 0 (tensor " in message, message
        assert "the bytes received differ from what the source sent" in \
            message, message
        assert "the session stays open" in message, message
        # The version still names update 1; the session goes on.
        assert steps[3][0][:3] == (1, src.placement_id, "step-1")
        assert steps[3][1:] == (1, True)
    assert source_steps[3] == target_steps[3]
    for k in (1, 3, 4):
        assert source_steps[2 * k - 2] == ("ok", k, 0, "", "recover.000001")
        assert target_steps[2 * k - 2] == ("ok", k, regions, "",
                                           "recover.000001")
        assert source_steps[2 * k - 1] == target_steps[2 * k - 1]
        assert target_steps[2 * k - 1][1:] == (1, True)
    assert target_steps[-1][0][:3] == (4, src.placement_id, "step-4")
    assert [(g, tag) for g, tag, _ in target_seen] == [
        (1, "step-1"), (3, "step-3"), (4, "step-4")]


def test_verification_off_checks_nothing_and_digests_zero(tmp_path):
    """verify=False on both processes: no region is verified, every byte
    still arrives, and the version's digest is 0."""
    src, dst = _placements()
    out = _run(tmp_path, 2, both=dict(verify=False))
    for rank in (0, 1):
        steps, _ = out[rank]
        assert steps[0] == ("ok", 1, 0, "", "recover.000001")
        assert steps[2] == ("ok", 2, 0, "", "recover.000001")
        assert steps[3] == ((2, src.placement_id, "step-2", 0), 1, True)


def _tag_seat(rank, rendezvous, results):
    """Process 0 passes a tag holding a newline, then a good one; process 1
    updates once."""
    src, dst = _placements()
    session = reshard.LiveSession(rendezvous, session="tags", rank=rank,
                                  ranks=2, source=src, target=dst, timeout=20)
    buffers = patterns.Buffers(src if rank == 0 else dst, "numpy")
    sources = buffers.by_participant() if rank == 0 else {}
    targets = buffers.by_participant() if rank == 1 else {}
    out = []
    if rank == 0:
        _fill(buffers, 1)
        try:
            session.update(sources, targets, tag="a\nb")
        except ValueError as error:
            out.append((type(error).__name__, str(error), session.step,
                        session.usable))
    report = session.update(sources, targets, tag="step-1" if rank == 0
                            else None)
    out.append((report.step, _mismatch(buffers, 1) if rank == 1 else "",
                _version(session)[2]))
    session.close()
    results.put((rank, out))


def test_a_tag_with_a_control_character_is_refused_before_anything(
        tmp_path):
    """A tag with a control character is refused (InvalidArgumentError, a
    ValueError) on the process that passed it, before anything is recorded
    or the step advances; the same update then runs with a good tag."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_tag_seat,
                         args=(r, str(tmp_path), results)) for r in range(2)]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert out[0] == [
        ("InvalidArgumentError", "LiveSession.update: version tag holds "
         "control character 10 at byte 1", 0, True),
        (1, "", "step-1")]
    assert out[1] == [(1, "", "step-1")]


def test_recovery_options_are_checked(tmp_path):
    """rejoin_timeout and on_version are checked before anything is
    opened, naming the option."""
    src, dst = _placements()
    for kwargs, message in (
            (dict(rejoin_timeout=float("nan")),
             "LiveSession: rejoin_timeout must be between 0 and 604800 "
             "seconds, not nan"),
            (dict(rejoin_timeout=-1),
             "LiveSession: rejoin_timeout must be between 0 and 604800 "
             "seconds, not -1"),
            (dict(on_version=3),
             "LiveSession.on_version must be a callable (version) or None, "
             "not int")):
        try:
            reshard.LiveSession(str(tmp_path), session="opts", rank=0,
                                ranks=2, source=src, target=dst, **kwargs)
        except reshard.InvalidArgumentError as error:
            assert str(error) == message
        else:
            raise AssertionError(f"{kwargs} was accepted")
    session = reshard.LiveSession(str(tmp_path), session="opts", rank=0,
                                  ranks=2, source=src, target=dst)
    assert (session.version, session.usable, session.connections,
            session.rejoins) == (None, True, 0, 0)
    for tag, message in (
            ("x" * 257, "version tag of 257 bytes (at most 256)"),
            ("\x7f", "version tag holds control character 127 at byte 0"),
            ("\ud800", "version tag is not valid UTF-8")):
        try:
            session.update({}, {}, tag=tag)
        except reshard.InvalidArgumentError as error:
            assert str(error) == "LiveSession.update: " + message
        else:
            raise AssertionError(f"tag {tag!r} was accepted")
    assert session.step == 0
    try:
        reshard._reshard.StandingSession(
            str(tmp_path), src, dst, {}, {}, session="opts", rank=0,
            ranks=1, rejoin_timeout=1e9)
    except reshard.InvalidArgumentError as error:
        assert "rejoin_timeout must be between 0 and 604800 seconds, not " \
            "1e+09" in str(error), str(error)
    else:
        raise AssertionError("a rejoin_timeout of 1e9 s was accepted")
    assert not os.listdir(tmp_path)


def _rejoin_seat(rank, rendezvous, role, results):
    """One process of a delta session of 4 updates: the "survivor" runs
    them all; the "victim" runs updates 1 and 2, reports, and waits to be
    killed; the "replacement" takes the victim's place (rejoin=True) and
    runs updates 3 and 4."""
    src, dst = _placements()
    session = reshard.LiveSession(
        rendezvous, session="again", rank=rank, ranks=2, source=src,
        target=dst, timeout=20, delta=True, rejoin=role == "replacement")
    buffers = patterns.Buffers(src if rank == 0 else dst, "numpy")
    sources = buffers.by_participant() if rank == 0 else {}
    targets = buffers.by_participant() if rank == 1 else {}
    out = []
    for k in (3, 4) if role == "replacement" else (1, 2, 3, 4):
        if rank == 0:
            _fill(buffers, k, sparse=True)
        try:
            report = session.update(sources, targets, step=k)
        except reshard.Error as error:
            out.append(("failed", k, type(error).__name__, str(error)))
            break
        out.append(("ok", k, report.verified_regions, report.delta_regions,
                    report.full_regions,
                    _mismatch(buffers, k, True) if rank == 1 else "",
                    report.session, session.connections, session.rejoins))
        if role == "victim" and k == 2:
            results.put((role, out))
            signal.pause()  # killed here, between updates 2 and 3
    session.close()
    results.put((role, out))


def _restart(rendezvous, victim):
    """Rank `victim` killed (SIGKILL) between updates 2 and 3 and started
    again with rejoin=True; {role: outcomes}."""
    ctx = mp.get_context("spawn")
    # A queue of its own for each process: a process killed right after it
    # wrote to a queue may still hold the queue's lock.
    results = {}

    def start(rank, role):
        results[role] = ctx.Queue()
        p = ctx.Process(target=_rejoin_seat,
                        args=(rank, str(rendezvous), role, results[role]))
        p.start()
        return p

    procs = [start(1 - victim, "survivor"), start(victim, "victim")]
    try:
        outcomes = {"victim": results["victim"].get(timeout=120)[1]}
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].join(timeout=60)
        assert procs[1].exitcode == -signal.SIGKILL
        procs.append(start(victim, "replacement"))
        for role in ("survivor", "replacement"):
            outcomes[role] = results[role].get(timeout=120)[1]
        for p in (procs[0], procs[2]):
            p.join(timeout=60)
            assert p.exitcode == 0
        return outcomes
    finally:
        for p in procs:  # a failed run leaves none of them behind
            if p.is_alive():
                p.kill()


@pytest.mark.parametrize("victim", [0, 1], ids=["source", "target"])
def test_a_killed_process_is_replaced_without_a_reopen(tmp_path, victim):
    """The process hosting the sources (then the targets) is killed between
    updates 2 and 3 and a new one takes its place with rejoin=True: the
    survivor's update 3 waits for it and runs on the same session, having
    connected again only to it (1 connection, then 2); every update
    verifies every region and lands byte for byte; the replacement's first
    update moves every region whole, and delta updates resume after it."""
    src, dst = _placements()
    regions = len(reshard.plan(src, dst).regions())
    out = _restart(tmp_path, victim)
    # The target process verifies every region; the source process none.
    verified = {0: 0, 1: regions}
    key = "again.000001"

    def updates(rank, ks, first_full, connections, rejoins):
        """The rows expected of `rank`'s updates `ks`: a full update (the
        first, and update `first_full`) reports no delta regions, a delta
        update every region as a change."""
        rows = []
        for k, conn, rej in zip(ks, connections, rejoins):
            delta = rank == 1 and k not in (1, first_full)
            rows.append(("ok", k, verified[rank], regions if delta else 0, 0,
                         "", key, conn, rej))
        return rows

    survivor = 1 - victim
    assert out["victim"] == updates(victim, (1, 2), None, (1, 1), (0, 0))
    assert out["replacement"] == updates(victim, (3, 4), 3, (1, 1), (0, 0))
    assert out["survivor"] == updates(survivor, (1, 2, 3, 4), 3,
                                      (1, 1, 2, 2), (0, 0, 1, 1))


def test_on_version_runs_on_the_updating_thread_and_its_error_is_raised(
        tmp_path):
    """One process hosting both sides (the in-process exchange): on_version
    is called with each version on the thread that called update(); an
    exception it raises is raised by that update() once it is done, the
    update itself having succeeded (the version names it, the targets hold
    it), and the next update runs as usual."""
    import threading
    src, dst = _placements()
    calls = []

    def seen(version):
        calls.append((version.generation, version.tag,
                      threading.current_thread() is threading.main_thread()))
        if version.generation == 1:
            raise RuntimeError("the engine refused version 1")

    session = reshard.LiveSession(str(tmp_path), session="one", rank=0,
                                  ranks=1, source=src, target=dst,
                                  exchange="inproc", on_version=seen)
    sources = patterns.Buffers(src, "numpy")
    targets = patterns.Buffers(dst, "numpy")
    _fill(sources, 1)
    try:
        session.update(sources.by_participant(), targets.by_participant(),
                       tag="a")
    except RuntimeError as error:
        assert str(error) == "the engine refused version 1"
    else:
        raise AssertionError("on_version's exception was not raised")
    assert _mismatch(targets, 1) == ""
    assert (session.version.generation, session.version.tag) == (1, "a")
    assert session.usable
    _fill(sources, 2)
    report = session.update(sources.by_participant(),
                            targets.by_participant(), tag="b")
    assert (report.step, report.verified_regions) == (2, 8)
    assert _mismatch(targets, 2) == ""
    assert calls == [(1, "a", True), (2, "b", True)]
    assert session.version.digest != 0
    version = session.version
    session.close()
    assert session.version == version and session.connections == 0
