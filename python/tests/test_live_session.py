"""LiveSession between two processes over UCX (and two threads over the
in-process exchange): every update byte-exact,
a rank whose own tensors are refused fails that step for everybody at
once without desynchronising later steps or reopening the session, and a
process that closes early is named by the other at once."""
import multiprocessing as mp
import os
import queue
import threading
import time

import torch

import reshard

SCENARIO = os.path.join(os.environ.get("RESHARD_TEST_DATA", ""), "scenarios",
                        "cross_dim_ep2_to_tp2_{}.json")


def _load(side):
    with open(SCENARIO.format(side)) as f:
        return reshard.Placement.from_json(f.read())


def _box(placement, frag, step, sparse=False):
    """The fragment's slice of a global tensor whose element i is
    (i + 7 * step) mod 251, as bfloat16 (exact for these integers); with
    `sparse`, only every 50th element changes with the step."""
    desc = placement.find_tensor(frag.tensor_id)
    n = 1
    for extent in desc.global_shape:
        n *= extent
    i = torch.arange(n)
    moving = (i % 50 == 0) if sparse else torch.ones(n, dtype=torch.bool)
    full = ((i + 7 * step * moving) % 251).to(torch.bfloat16)
    full = full.reshape(desc.global_shape)
    index = tuple(slice(o, o + s) for o, s in
                  zip(frag.global_offset, frag.local_shape))
    return full[index].contiguous()


def _rank(rank, rendezvous, bad_step, results, move_targets=False,
          shadow=False, delta=False, exchange="ucx"):
    src, dst = _load("source"), _load("target")
    spart, tpart = src.parts[rank], dst.parts[rank]
    session = reshard.LiveSession(rendezvous, "steps", rank=rank, ranks=2,
                                  source=src, target=dst, timeout=20,
                                  shadow_targets=shadow, delta=delta,
                                  exchange=exchange)
    targets = {f.placement_fragment_id: torch.zeros(f.local_shape,
                                                    dtype=torch.bfloat16)
               for f in tpart.fragments}
    outcome = []
    # The trainer's weights stay in place and change value every step.
    held = {f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
            for f in spart.fragments}
    sources = {spart.participant_id: held}
    for step in (1, 2, 3):
        for f in spart.fragments:
            held[f.tensor_id].copy_(_box(src, f, step, sparse=delta))
        if move_targets and step == 2:  # the engine re-allocates
            targets = {k: torch.zeros_like(v) for k, v in targets.items()}
        given = dict(targets)
        if step == bad_step and rank == 1:
            first = next(iter(given))
            given[first] = torch.zeros(3, dtype=torch.bfloat16)
        try:
            report = session.update(sources, {tpart.participant_id: {
                dst.find_fragment(k).tensor_id: v for k, v in given.items()}})
        except reshard.Error as e:
            outcome.append((step, type(e).__name__, str(e)))
            continue
        ok = all(torch.equal(targets[f.placement_fragment_id],
                             _box(dst, f, step, sparse=delta))
                 for f in tpart.fragments)
        # A session reopened under another key is named.
        reopened = report.session != "steps.000001"
        outcome.append((step, "ok" if ok and report.ready else "WRONG",
                        report.step) + (("rebound",) if report.rebound else ())
                       + ((("delta", report.delta_regions,
                            report.full_regions),) if delta else ())
                       + ((report.session,) if reopened else ()))
    results.put((rank, outcome))


def _run(rendezvous, bad_step, **kwargs):
    """Both ranks in processes of their own, meeting at `rendezvous` (a
    directory or any rendezvous URI)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, str(rendezvous), bad_step,
                                             results), kwargs=kwargs)
             for r in range(2)]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_three_updates_each_checked(tmp_path):
    out = _run(tmp_path, bad_step=None)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1), (2, "ok", 2), (3, "ok", 3)]


def test_refused_tensor_fails_the_step_everywhere_and_next_step_works(
        tmp_path):
    """Process 1's own tensors are refused in step 2: it raises their
    error, its fence fails the update on both processes before any byte
    moves (process 0 names it and its reason), and step 3 runs on the same
    session: nothing is reopened."""
    out = _run(tmp_path, bad_step=2)
    assert out[0][0] == (1, "ok", 1) and out[1][0] == (1, "ok", 1)
    step, kind, message = out[1][1]
    assert (step, kind) == (2, "InvalidArgumentError")
    assert "target tensor" in message and "is too small: 6 bytes" in message
    step, kind, message = out[0][1]
    assert (step, kind) == (2, "AbortedError")
    assert message.startswith(
        "live session steps.000001 failed as decided by rank 1: "
        "FailedPrecondition: live session steps.000001, rank 1, update 2: "
        "rank 1 refused its tensors: target tensor "), message
    assert message.endswith(
        "(the session stays open: retry the update or run the next one)")
    assert out[0][2] == (3, "ok", 3) and out[1][2] == (3, "ok", 3)


def test_moved_targets_are_rebound_and_shadowed_updates_land(tmp_path):
    """Both processes re-allocate their targets before step 2: the session
    rebinds them (the sources stay where they were, as a pull session's
    registered sources must) and step 2 lands in the new tensors; with
    shadow targets every update still arrives byte for byte."""
    out = _run(tmp_path / "moved", bad_step=None, move_targets=True)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1), (2, "ok", 2, "rebound"),
                             (3, "ok", 3)]
    out = _run(tmp_path / "shadow", bad_step=None, shadow=True)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1), (2, "ok", 2), (3, "ok", 3)]


def test_delta_updates_land_and_reallocated_targets_get_whole_regions(
        tmp_path):
    """delta=True: steps 2 and 3 send only the changed elements of each
    region that crosses processes (two each way here) and land byte
    for byte; targets re-allocated before step 2 hold no base, so that step
    sends their regions whole, and step 3 is a delta again."""
    out = _run(tmp_path / "delta", bad_step=None, delta=True)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1, ("delta", 0, 0)),
                             (2, "ok", 2, ("delta", 2, 0)),
                             (3, "ok", 3, ("delta", 2, 0))]
    out = _run(tmp_path / "moved", bad_step=None, delta=True,
               move_targets=True)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1, ("delta", 0, 0)),
                             (2, "ok", 2, "rebound", ("delta", 0, 2)),
                             (3, "ok", 3, ("delta", 2, 0))]


def _early_close_rank(rank, rendezvous, results):
    """One update on both ranks; then rank 1 closes while rank 0 updates
    again (a session timeout of a minute)."""
    src, dst = _load("source"), _load("target")
    spart, tpart = src.parts[rank], dst.parts[rank]
    session = reshard.LiveSession(rendezvous, "early", rank=rank, ranks=2,
                                  source=src, target=dst, timeout=60)
    sources = {spart.participant_id: {f.tensor_id: _box(src, f, 1)
                                      for f in spart.fragments}}
    targets = {tpart.participant_id: {
        f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
        for f in tpart.fragments}}
    session.update(sources, targets)
    t0 = time.monotonic()
    try:
        if rank == 1:
            session.close()
        else:
            session.update(sources, targets)
    except reshard.Error as e:
        results.put((rank, type(e).__name__, str(e), time.monotonic() - t0))
    else:
        results.put((rank, "ok", "", time.monotonic() - t0))


def test_early_close_is_named_within_seconds(tmp_path):
    """A process that closes after fewer updates than the other is named by
    it within a couple of seconds, like a dead one, not after the session
    timeout of a minute; its own close() reports that failure."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_early_close_rank,
                         args=(r, str(tmp_path), results)) for r in range(2)]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        rank, kind, message, seconds = results.get(timeout=120)
        out[rank] = (kind, message, seconds < 3)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    named = ("live session early.000001, rank 0, update 2: live session "
             "early.000001: rank 1 closed the session after 1 update")
    assert out[0] == ("AbortedError", named, True)
    assert out[1] == ("AbortedError", "live session early.000001 aborted by "
                      "rank 0: Aborted: " + named, True)


def test_in_process_exchange_runs_the_ranks_as_threads(tmp_path):
    """exchange="inproc": both ranks are threads of this process; every
    update byte-exact, as over UCX."""
    results = queue.Queue()
    threads = [threading.Thread(target=_rank,
                                args=(r, str(tmp_path), None, results),
                                kwargs=dict(exchange="inproc"))
               for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    out = dict(results.get(timeout=1) for _ in threads)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1), (2, "ok", 2), (3, "ok", 3)]


def test_exchanges_are_listed_and_chosen_by_name(tmp_path):
    """registered_exchanges() lists what LiveSession(exchange=...) takes;
    an unknown name is refused listing them; settings go to the exchange,
    which refuses one it does not take; ucx_tls is the "tls" setting."""
    assert reshard.registered_exchanges() == ["cuda-ipc", "inproc", "nccl", "ucx"]
    src, dst = _load("source"), _load("target")
    try:
        reshard.LiveSession(str(tmp_path), "x", rank=0, ranks=1, source=src,
                            target=dst, exchange="nixl")
    except reshard.InvalidArgumentError as error:
        assert str(error) == (
            "LiveSession.exchange: unknown peer exchange 'nixl' "
            "(registered: cuda-ipc, inproc, nccl, ucx)")
    else:
        raise AssertionError("an unknown exchange was accepted")
    alias = reshard.LiveSession(str(tmp_path), "x", rank=0, ranks=1,
                                source=src, target=dst, ucx_tls="tcp")
    assert alias.exchange == "ucx"
    assert alias.exchange_options == {"tls": "tcp"}
    try:
        reshard._reshard.StandingSession(
            str(tmp_path), src, dst, {}, {}, session="opts", rank=0,
            ranks=1, exchange="inproc", exchange_options={"tls": "tcp"})
    except reshard.InvalidArgumentError as error:
        assert str(error) == ('live session: peer exchange "inproc" has no '
                              'setting "tls" (it takes none)')
    else:
        raise AssertionError("a setting inproc does not take was accepted")
    assert not os.listdir(tmp_path)


def test_concurrent_update_on_one_session_is_refused(tmp_path):
    """While one thread's update() runs, another thread's call on the same
    object is refused at once, naming the session; nothing is opened or
    recorded for it."""
    src, dst = _load("source"), _load("target")
    session = reshard.LiveSession(str(tmp_path), "busy", rank=0, ranks=2,
                                  source=src, target=dst, timeout=5)
    assert session._busy.acquire(blocking=False)  # an update in flight
    try:
        try:
            session.update({}, {})
        except reshard.FailedPreconditionError as error:
            assert str(error) == (
                "live session busy: update() is already running in another "
                "thread; updates of one session are sequential")
        else:
            raise AssertionError("a concurrent update() was not refused")
    finally:
        session._busy.release()
    assert session.step == 0 and not os.listdir(tmp_path)


def test_timeouts_and_liveness_options_are_checked(tmp_path):
    """NaN, infinite and absurd durations are refused before anything is
    opened, naming the option."""
    src, dst = _load("source"), _load("target")
    for kwargs, message in (
            (dict(timeout=float("nan")),
             "timeout must be > 0 and at most 604800 seconds"),
            (dict(timeout=1e300),
             "timeout must be > 0 and at most 604800 seconds"),
            (dict(peer_timeout=float("inf")),
             "peer_timeout must be between 0 and 3600 seconds"),
            (dict(heartbeat_interval=-1.0),
             "heartbeat_interval must be between 0 and 3600 seconds"),
            (dict(device_staging="pinned"),
             'device_staging must be "pipeline" or "mirror", got "pinned"'),
            (dict(device_staging_bytes=-1), "device_staging_bytes")):
        try:
            reshard._reshard.StandingSession(
                str(tmp_path), src, dst, {}, {}, session="opts", rank=0,
                ranks=1, **kwargs)
        except reshard.InvalidArgumentError as error:
            assert message in str(error), str(error)
        else:
            raise AssertionError(f"{kwargs} was accepted")
    assert not os.listdir(tmp_path)


def _m2n_rank(rank, rendezvous, m2n, results):
    """Ranks 0 and 1 hold the sources, 2 and 3 the targets (the sides of
    NCCL M2N's communicator must not overlap); one update."""
    src, dst = _load("source"), _load("target")
    session = reshard.LiveSession(
        rendezvous, "m2n", rank=rank, ranks=4, source=src, target=dst,
        timeout=20, exchange="nccl",
        exchange_options={"api": "host", "m2n": m2n})
    sources, targets, ok = {}, {}, True
    if rank < 2:
        part = src.parts[rank]
        sources = {part.participant_id: {f.tensor_id: _box(src, f, 1)
                                         for f in part.fragments}}
    else:
        part = dst.parts[rank - 2]
        held = {f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
                for f in part.fragments}
        targets = {part.participant_id: held}
    report = session.update(sources, targets)
    if rank >= 2:
        ok = all(torch.equal(held[f.tensor_id], _box(dst, f, 1))
                 for f in part.fragments)
    session.close()
    results.put((rank, ok, report.m2n_tensors))


def test_nccl_host_emulation_moves_whole_tensors_through_m2n(tmp_path):
    """exchange="nccl" with api=host (ranks as threads): both tensors of
    the EP2 -> TP2 scenario move whole through the emulated ncclReshard
    (the update's m2n_tensors), byte-exact; m2n=off moves the same bytes
    by send/recv."""
    for m2n, moved in (("auto", 2), ("off", 0)):
        results = queue.Queue()
        threads = [threading.Thread(target=_m2n_rank,
                                    args=(r, str(tmp_path / m2n), m2n,
                                          results))
                   for r in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        out = sorted(results.get(timeout=1) for _ in threads)
        assert out == [(r, True, moved) for r in range(4)], m2n
