"""vLLM's own model classes and load_weights on CPU against `engine load`.

Every rank of a case is a process forked from the driver (which imported
vLLM once): torch.distributed over gloo, vLLM's external-launcher grid
(world rank = (dp x pp + p) x tp + t), the model class vLLM's default loader
builds for the checkpoint, and that loader's `load_weights` (the safetensors
iterator). Each rank dumps `named_parameters()` in order (safetensors, raw
bytes) and its declared parameter list (JSON). `build/reshard engine load`
writes the same ranks; the two are compared byte for byte.
"""

import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import time
import traceback

import safetensors_raw

CASE_TIMEOUT_S = 240


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def preload():
    """Imports vLLM in the driver so forked ranks start at once."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    # humming (a kernel package vLLM imports) starts background compiler
    # builds in new interpreters at import, in every rank; none can work on
    # CPU and each costs an interpreter start.
    os.environ.setdefault("HUMMING_DISABLE_PARALLEL_BUILD", "1")
    import torch

    torch.set_num_threads(1)
    import vllm  # noqa: F401
    from vllm.config import set_current_vllm_config  # noqa: F401
    from vllm.distributed import (  # noqa: F401
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )
    from vllm.engine.arg_utils import EngineArgs  # noqa: F401
    from vllm.model_executor.model_loader import get_model_loader  # noqa: F401

    # The model modules and the layers they build, imported once here rather
    # than in every forked rank.
    import importlib

    for mod in ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v2",
                "glm4_moe", "gpt_oss", "qwen3_next", "qwen3_5"):
        try:
            importlib.import_module("vllm.model_executor.models." + mod)
        except Exception:  # noqa: BLE001 - the ranks report what fails
            pass
    for mod in ("vllm.model_executor.layers.fused_moe",
                "vllm.model_executor.layers.quantization.fp8",
                "vllm.model_executor.layers.linear",
                "vllm.model_executor.layers.vocab_parallel_embedding"):
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001
            pass
    return vllm.__version__


def _allow_cpu_fp8_kernel_class():
    """Lets vLLM's FP8 linear layers pick their CPU block-FP8 kernel class on
    a CPU without AMX and with any block shape. The kernel only ever runs in
    forward passes and process_weights_after_loading, neither of which runs
    here: construction and load_weights (what is compared) do not depend on
    it."""
    from vllm.model_executor.kernels.linear.scaled_mm import cpu

    ok = classmethod(lambda cls, *a, **k: (True, None))
    cpu.CPUFp8BlockScaledMMKernel.is_supported = ok
    cpu.CPUFp8BlockScaledMMKernel.can_implement = ok


def _rank_main(ckpt, tp, pp, dp, ep, rank, port, out_dir, fp8_shim=False):
    result = {"rank": rank}
    t0 = time.time()
    timings = result["seconds"] = {}
    try:
        import torch

        torch.set_num_threads(1)
        # Memory torch allocates and nobody writes reads as NaN, so a
        # parameter region load_weights leaves alone cannot pass for zero
        # padding.
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        world = tp * pp * dp
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        from vllm.config import set_current_vllm_config
        from vllm.distributed import (
            ensure_model_parallel_initialized,
            init_distributed_environment,
        )
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.model_loader import get_model_loader
        from vllm.utils.torch_utils import set_default_torch_dtype

        if fp8_shim:
            _allow_cpu_fp8_kernel_class()
        args = EngineArgs(
            model=ckpt,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            data_parallel_size=dp,
            enable_expert_parallel=bool(ep),
            distributed_executor_backend="external_launcher",
            skip_tokenizer_init=True,
            load_format="safetensors",
            enforce_eager=True,
        )
        vc = args.create_engine_config()
        timings["config"] = round(time.time() - t0, 2)
        with set_current_vllm_config(vc):
            init_distributed_environment(
                world, rank, "env://", rank, backend="gloo"
            )
            ensure_model_parallel_initialized(tp, pp)
            timings["groups"] = round(time.time() - t0, 2)
            loader = get_model_loader(vc.load_config)
            with set_default_torch_dtype(vc.model_config.dtype):
                with torch.device("cpu"):
                    model = loader.create_model(
                        vllm_config=vc, model_config=vc.model_config
                    )
                    timings["model"] = round(time.time() - t0, 2)
                    loader.load_weights(model, vc.model_config)
                    timings["load"] = round(time.time() - t0, 2)
        declared = []
        tensors = {}
        for name, p in model.named_parameters():
            declared.append(
                {
                    "name": name,
                    "shape": list(p.shape),
                    "dtype": str(p.dtype).replace("torch.", ""),
                }
            )
            tensors[name] = p.detach().contiguous().clone()
        from safetensors.torch import save_file

        save_file(tensors, os.path.join(out_dir, f"rank{rank}.safetensors"))
        with open(os.path.join(out_dir, f"rank{rank}.params.json"), "w") as f:
            json.dump(declared, f, indent=1)
        result["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported, not raised
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {e}"
        result["trace"] = traceback.format_exc()[-4000:]
    with open(os.path.join(out_dir, f"rank{rank}.result.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)


_WARM = {}


def warm(ckpt):
    """Builds one engine config for ckpt in the driver, before any fork:
    vLLM inspects a model class in a subprocess the first time it meets its
    architecture and caches the answer, so the ranks forked after this find
    it cached instead of each starting an interpreter. Returns an error
    message or ""."""
    if ckpt not in _WARM:
        try:
            from vllm.engine.arg_utils import EngineArgs

            os.environ.setdefault("RANK", "0")
            EngineArgs(
                model=ckpt,
                distributed_executor_backend="external_launcher",
                skip_tokenizer_init=True,
                load_format="safetensors",
                enforce_eager=True,
            ).create_engine_config()
            _WARM[ckpt] = ""
        except Exception as e:  # noqa: BLE001 - the ranks report it
            _WARM[ckpt] = f"{type(e).__name__}: {e}"
    return _WARM[ckpt]


def run_vllm(ckpt, tp, pp, dp, ep, out_dir):
    """Runs every rank; returns (ok, message)."""
    with open(os.path.join(ckpt, "config.json")) as f:
        fp8_shim = "quantization_config" in json.load(f)
    if fp8_shim:
        _allow_cpu_fp8_kernel_class()
    warm(ckpt)
    os.makedirs(out_dir, exist_ok=True)
    world = tp * pp * dp
    port = _free_port()
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(ckpt, tp, pp, dp, ep, r, port, out_dir, fp8_shim),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.time() + CASE_TIMEOUT_S
    for p in procs:
        p.join(max(0.1, deadline - time.time()))
    timed_out = [p for p in procs if p.is_alive()]
    for p in timed_out:
        p.kill()
        p.join()
    errors = []
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.result.json")
        if not os.path.exists(path):
            errors.append(f"rank {r}: no result (timed out or crashed)")
            continue
        with open(path) as f:
            res = json.load(f)
        if not res["ok"]:
            errors.append(f"rank {r}: {res['error']}")
    if errors:
        return False, errors[0].splitlines()[0][:600]
    return True, ""


def rank_coords(rank, tp, pp):
    return rank // (pp * tp), (rank // tp) % pp, rank % tp


def run_reshard(reshard, engine, ckpt, tp, pp, dp, ep, out_dir):
    """engine layout (for the order) and engine load; (ok, message)."""
    grid = ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp)]
    grid += ["--ep", str(tp * dp if ep else 1)]
    os.makedirs(out_dir, exist_ok=True)
    lay = subprocess.run(
        [reshard, "engine", "layout", os.path.join(ckpt, "config.json"),
         "--engine", engine, "--checkpoint", ckpt,
         "-o", os.path.join(out_dir, "placement.json"),
         "--params", os.path.join(out_dir, "params.json")] + grid,
        capture_output=True, text=True, timeout=300,
    )
    if lay.returncode != 0:
        return False, (lay.stderr.strip() or lay.stdout.strip())[:600]
    cmd = [reshard, "engine", "load", ckpt, "--engine", engine,
           "-o", os.path.join(out_dir, "load")] + grid
    load = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if load.returncode != 0:
        msg = (load.stderr.strip() or load.stdout.strip())[:600]
        if "--convert" not in msg:
            return False, msg
        # A dtype the engine holds other than the checkpoint's (vLLM widens
        # some tensors while loading): retry with --convert so the bytes are
        # still compared, and say so.
        shutil.rmtree(os.path.join(out_dir, "load"), ignore_errors=True)
        load = subprocess.run(cmd + ["--convert"], capture_output=True,
                              text=True, timeout=300)
        if load.returncode != 0:
            return False, msg
        return True, "needed --convert: " + msg
    return True, ""


_DTYPES = {
    "bfloat16": "BF16",
    "float32": "F32",
    "float16": "F16",
    "float8_e4m3fn": "F8_E4M3",
    "uint8": "U8",
    "int32": "I32",
    "int64": "I64",
}


def compare_rank(vllm_dir, rank, reshard_dir, participant):
    """One rank pair: {"result": strict|names|mismatch, ...}."""
    v = safetensors_raw.read(os.path.join(vllm_dir, f"rank{rank}.safetensors"))
    with open(os.path.join(vllm_dir, f"rank{rank}.params.json")) as f:
        v_order = [p["name"] for p in json.load(f)]
    r = safetensors_raw.read(
        os.path.join(reshard_dir, "load", participant + ".safetensors")
    )
    with open(os.path.join(reshard_dir, "params.json")) as f:
        maps = json.load(f)
    r_order = []
    for part in maps["participants"]:
        if part["participant_id"] == participant:
            r_order = [p["name"] for p in part["parameters"]]
    vt, rt = v["tensors"], r["tensors"]
    out = {"participant": participant, "rank": rank}
    # Pair names: identical names first, then (for the rest) parameters of
    # identical dtype, shape and bytes under other names.
    only_v = [n for n in v_order if n not in rt]
    only_r = [n for n in r_order if n not in vt]
    renamed = {}
    for n in only_v:
        for m in only_r:
            if m not in renamed.values() and vt[n] == rt[m]:
                renamed[n] = m
                break
    first = None
    for n in v_order:
        m = n if n in rt else renamed.get(n)
        if m is None:
            first = {
                "parameter": n,
                "why": "vLLM holds it; reshard's engine load has no "
                "parameter of that name (nor one with its bytes)",
                "vllm": [vt[n][0], vt[n][1]],
            }
            break
        (dv, sv, bv), (dr, sr, br) = vt[n], rt[m]
        why = None
        if dv != dr:
            why = f"dtype: vLLM {dv}, reshard {dr}"
        elif sv != sr:
            why = f"shape: vLLM {sv}, reshard {sr}"
        elif bv != br:
            i = safetensors_raw.first_difference(dv, bv, br)
            why = f"bytes differ from element {i}"
            if safetensors_raw.is_nan_element(dv, bv, i):
                why += " (vLLM's element is NaN: memory its load_weights never wrote)"
        if why:
            first = {"parameter": n, "reshard_parameter": m, "why": why}
            break
    if first is None:
        extra = [m for m in r_order if m not in vt and m not in renamed.values()]
        if extra:
            first = {
                "parameter": extra[0],
                "why": "reshard's engine load writes it; vLLM holds no "
                "parameter of that name (nor one with its bytes)",
            }
    if first is not None:
        out["result"] = "mismatch"
        out["first_difference"] = first
    elif renamed:
        out["result"] = "names"
        out["renamed"] = renamed
    else:
        out["result"] = "strict"
    # Order: the parameters both hold, in each side's order.
    mapped = [renamed.get(n, n) for n in v_order]
    r_set, m_set = set(r_order), set(mapped)
    mine = [m for m in mapped if m in r_set]
    theirs = [m for m in r_order if m in m_set]
    out["order_matches"] = mine == theirs
    if not out["order_matches"]:
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a != b:
                out["order_first"] = {"index": i, "vllm": a, "reshard": b}
                break
    return out


def run_case(case, ckpt, work, reshard, engine):
    """Runs one case: both sides, then every rank pair."""
    tp, pp, dp, ep = case["tp"], case["pp"], case["dp"], case["ep"]
    case_dir = os.path.join(work, case["id"])
    shutil.rmtree(case_dir, ignore_errors=True)
    vdir = os.path.join(case_dir, "vllm")
    rdir = os.path.join(case_dir, "reshard")
    t0 = time.time()
    v_ok, v_msg = run_vllm(ckpt, tp, pp, dp, ep, vdir)
    retries = 0
    while not v_ok and retries < 2 and any(
        s in v_msg for s in ("DistNetworkError", "Connection", "no result")
    ):
        # The rendezvous of the ranks, not vLLM's answer: run it again.
        retries += 1
        shutil.rmtree(vdir, ignore_errors=True)
        v_ok, v_msg = run_vllm(ckpt, tp, pp, dp, ep, vdir)
    t1 = time.time()
    r_ok, r_msg = run_reshard(reshard, engine, ckpt, tp, pp, dp, ep, rdir)
    res = dict(case, vllm_seconds=round(t1 - t0, 1),
               reshard_seconds=round(time.time() - t1, 1))
    if retries:
        res["vllm_retries"] = retries
    if r_ok and r_msg:
        res["reshard_note"] = r_msg
    if not v_ok:
        res["result"] = "refused by vLLM"
        res["message"] = v_msg
        res["reshard"] = "accepted" if r_ok else "refused: " + r_msg
        return res
    if not r_ok:
        res["result"] = "refused by reshard"
        res["message"] = r_msg
        return res
    files = {}
    for name in os.listdir(os.path.join(rdir, "load")):
        pid = name[: -len(".safetensors")]
        d, p, _, t = pid.split("-")[1:]
        files[(int(d[1:]), int(p[1:]), int(t[1:]))] = pid
    pairs = []
    for rank in range(tp * pp * dp):
        pid = files.get(rank_coords(rank, tp, pp))
        if pid is None:
            pairs.append({"rank": rank, "result": "mismatch",
                          "first_difference": {"why": "reshard wrote no file "
                                               "for this rank's coordinates"}})
            continue
        pairs.append(compare_rank(vdir, rank, rdir, pid))
    res["pairs"] = pairs
    kinds = [p["result"] for p in pairs]
    if all(k == "strict" for k in kinds):
        res["result"] = "strict match"
    elif all(k in ("strict", "names") for k in kinds):
        res["result"] = "match after names"
    else:
        res["result"] = "mismatch"
        bad = next(p for p in pairs if p["result"] == "mismatch")
        res["first_difference"] = dict(bad["first_difference"],
                                       participant=bad.get("participant"))
    res["order_matches"] = all(p.get("order_matches", True) for p in pairs)
    if res.get("reshard_note"):
        res["result"] += " with --convert"
    return res


def check_fingerprint(case, ckpt, work, reshard, engine, old_engine):
    """The parameter-map declaration `engine layout --declare` writes for
    `engine`, against what vLLM's ranks really hold (name, shape, dtype, in
    order); then `engine load --engine old_engine --declared-maps` of that
    declaration, which must be refused naming the first differing
    parameter. Returns a dict for the case."""
    tp, pp, dp, ep = case["tp"], case["pp"], case["dp"], case["ep"]
    grid = ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
            "--ep", str(tp * dp if ep else 1)]
    d = os.path.join(work, case["id"], "fingerprint")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    decl = os.path.join(d, "declared.json")
    p = subprocess.run(
        [reshard, "engine", "layout", os.path.join(ckpt, "config.json"),
         "--engine", engine, "--checkpoint", ckpt,
         "-o", os.path.join(d, "placement.json"), "--declare", decl] + grid,
        capture_output=True, text=True, timeout=300)
    out = {"engine": engine, "old_engine": old_engine}
    if p.returncode != 0:
        out["declaration"] = "not written: " + (p.stderr.strip() or p.stdout.strip())[:400]
        return out
    with open(decl) as f:
        declared = json.load(f)
    vdir = os.path.join(work, case["id"], "vllm")
    agree = "agrees with vLLM's named_parameters() on every rank"
    for part in declared["participants"]:
        dd, pp_, _, tt = part["participant_id"].split("-")[1:]
        coords = (int(dd[1:]), int(pp_[1:]), int(tt[1:]))
        rank = next(r for r in range(tp * pp * dp) if rank_coords(r, tp, pp) == coords)
        with open(os.path.join(vdir, f"rank{rank}.params.json")) as f:
            real = [(x["name"], x["shape"], x["dtype"]) for x in json.load(f)]
        mine = [(x["name"], x["shape"], x["dtype"]) for x in part["parameters"]]
        if mine != real:
            i = next((i for i, (a, b) in enumerate(zip(mine, real)) if a != b),
                     min(len(mine), len(real)))
            agree = (f"differs from vLLM rank {rank} at parameter {i}: declared "
                     f"{mine[i] if i < len(mine) else None}, vLLM {real[i] if i < len(real) else None}")
            break
    out["declaration"] = agree
    p = subprocess.run(
        [reshard, "engine", "load", ckpt, "--engine", old_engine,
         "--declared-maps", decl, "-o", os.path.join(d, "old")] + grid,
        capture_output=True, text=True, timeout=300)
    msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
    if p.returncode == 0:
        out["old_map"] = "accepted (should be refused)"
    else:
        out["old_map"] = "refused: " + (msg[-1] if msg else "")[:600]
    return out
