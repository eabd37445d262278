"""Parameter-map fingerprints from Python: a layout declares its maps, a
map of another engine release is refused naming the first differing
parameter, and a LiveSession checks what the target process declares at
open: a trainer that built its map for vLLM before 0.33 fails loudly
against a 0.33 engine (both processes, before anything moves), and the
matching release moves every byte."""

import json
import multiprocessing as mp

import pytest
import torch

import reshard
import reshard.engines
from test_engines import bound, check_every_byte, filled, poisoned

CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "intermediate_size": 48, "moe_intermediate_size": 16,
    "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "mlp_only_layers": [0], "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
OLD, NEW = "vllm@<0.33", "vllm@0.33"
ENGINE = "p-d0-p0-e0-t0"


def layout(engine):
    return reshard.engines.layout(CONFIG, engine=engine)


def first_difference():
    """(index, old name, new name, shape, dtype) of the first parameter
    whose name differs between the releases."""
    old, new = layout(OLD), layout(NEW)
    o = list(old.parameters(ENGINE).items())
    n = list(new.parameters(ENGINE).items())
    i = next(k for k in range(len(o)) if o[k][0] != n[k][0])
    return i, o[i][0], n[i][0], o[i][1][0], o[i][1][1]


def expected_refusal(who):
    old, new = layout(OLD), layout(NEW)
    old_id = json.loads(old.declare())["participants"][0]["parameter_map_id"]
    new_id = json.loads(new.declare())["participants"][0]["parameter_map_id"]
    i, old_name, new_name, shape, dtype = first_difference()
    dims = "[" + ", ".join(map(str, shape)) + "]"
    return (f"parameter map mismatch for participant {ENGINE}: this side "
            f"built {OLD} (parameter map {old_id}), {who} declares {NEW} "
            f"(parameter map {new_id}); first difference at parameter {i}: "
            f"this side's map has {old_name} {dims} {dtype}, the declared has "
            f"{new_name} {dims} {dtype}")


def test_releases_name_their_maps_and_a_declaration_checks_them():
    old, new = layout(OLD), layout(NEW)
    assert old.engine == OLD and new.engine == NEW
    # One placement: the releases differ in names only.
    assert old.placement.placement_id == new.placement.placement_id
    assert old.parameter_map_id != new.parameter_map_id
    assert layout("vllm").parameter_map_id == new.parameter_map_id
    _, old_name, new_name, _, _ = first_difference()
    assert old_name.endswith(".mlp.experts.w13_weight")
    assert new_name.endswith(".mlp.experts.routed_experts.w13_weight")
    declared = new.declare([ENGINE])
    new.check_declared(declared)
    with pytest.raises(reshard.FailedPreconditionError) as e:
        old.check_declared(declared, who="the engine")
    assert str(e.value) == expected_refusal("the engine")
    with pytest.raises(reshard.InvalidArgumentError, match="no such"):
        new.declare(["p-d7-p0-e0-t0"])
    forged = json.loads(declared)
    forged["participants"][0]["parameters"][0]["dtype"] = "float32"
    with pytest.raises(reshard.InvalidArgumentError,
                       match="is not the hash of its parameters"):
        new.check_declared(json.dumps(forged))


def _rank(rank, rendezvous, expect, results):
    """Rank 0: the trainer, holding the canonical tensors (hf layout) and
    expecting the engine's maps to be `expect`'s; rank 1: a vLLM 0.33
    engine declaring its maps."""
    source, engine = layout("hf"), layout(NEW)
    session = reshard.LiveSession(
        rendezvous, "fp", rank=rank, ranks=2, source=source.placement,
        target=engine.placement, timeout=20,
        declare_maps=engine if rank == 1 else None,
        expect_maps=layout(expect) if rank == 0 else None)
    try:
        if rank == 0:
            src = filled(source)
            session.update(bound(source, src), {})
            session.close()
            results.put((rank, "ok"))
            return
        dst = poisoned(engine)
        session.update({}, {ENGINE: engine.bind(ENGINE, dst[ENGINE])})
        session.close()
        engine.zero_padding(ENGINE, dst[ENGINE])
        results.put((rank, "ok %d" % check_every_byte(engine, dst)))
    except reshard.Error as e:
        results.put((rank, f"{type(e).__name__}: {e}"))


def _run(tmp_path, expect):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, str(tmp_path), expect,
                                             results)) for r in (0, 1)]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return out


def test_live_session_refuses_an_older_release_at_open(tmp_path):
    out = _run(tmp_path, OLD)
    refusal = expected_refusal("rank 1")
    assert out[0].startswith("FailedPreconditionError: "), out
    assert refusal in out[0], out
    # The engine learns why, and none of its parameters was written.
    assert refusal in out[1], out


def test_live_session_with_the_declared_release_moves_every_byte(tmp_path):
    out = _run(tmp_path, NEW)
    assert out[0] == "ok", out
    assert out[1].startswith("ok "), out
    # Every byte of the engine's parameters (padding included) was checked.
    assert int(out[1].split()[1]) == sum(
        torch.Size(shape).numel() * 2
        for shape, _ in layout(NEW).parameters(ENGINE).values())
