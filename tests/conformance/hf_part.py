"""transformers-written checkpoints through reshard's hf layer.

Each tiny model is saved by `save_pretrained` (original and fused save
formats where they differ, tied and untied), then goes through `hf layout`,
`hf reshard` (to TP 2), `hf import` into an fs:// store and `hf export` back,
and `engine load --engine hf` (TP 1 and TP 2). Every output checkpoint must
hold the original tensors bit for bit, and `from_pretrained` of the export
(no file copied into it) must equal the original's state dict.
"""

import glob
import json
import os
import shutil
import subprocess

import safetensors_raw
import tiny_models


def read_checkpoint(d):
    """{name: (dtype, shape, bytes)} over every *.safetensors of d."""
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        out.update(safetensors_raw.read(path)["tensors"])
    return out


def compare_tensors(want, got):
    """None when equal, else the first difference (sorted names)."""
    for n in sorted(want):
        if n not in got:
            return f"{n}: missing"
        if want[n][0] != got[n][0]:
            return f"{n}: dtype {got[n][0]}, original {want[n][0]}"
        if want[n][1] != got[n][1]:
            return f"{n}: shape {got[n][1]}, original {want[n][1]}"
        if want[n][2] != got[n][2]:
            i = safetensors_raw.first_difference(want[n][0], want[n][2], got[n][2])
            return f"{n}: bytes differ from element {i}"
    extra = sorted(set(got) - set(want))
    if extra:
        return f"{extra[0]}: not in the original"
    return None


def _box(tensor, offset, shape):
    """Raw bytes of the box [offset, offset + shape) of a (dtype, shape,
    bytes) tensor, row-major."""
    import numpy as np

    dtype, full, data = tensor
    size = safetensors_raw.ITEMSIZE[dtype]
    a = np.frombuffer(data, dtype=np.uint8).reshape(list(full) + [size])
    idx = tuple(slice(o, o + n) for o, n in zip(offset, shape))
    return np.ascontiguousarray(a[idx]).tobytes()


def check_engine_files(orig, placement_path, params_path, out_dir):
    """None when every engine-load file holds exactly its map's pieces, each
    the bytes of its fragment's box of the original tensor."""
    with open(placement_path) as f:
        placement = json.load(f)
    with open(params_path) as f:
        maps = json.load(f)
    frags = {}
    for part in placement["parts"]:
        for fr in part["fragments"]:
            frags[fr["placement_fragment_id"]] = fr
    for part in maps["participants"]:
        pid = part["participant_id"]
        path = os.path.join(out_dir, pid + ".safetensors")
        if not os.path.exists(path):
            return f"no file for participant {pid}"
        got = safetensors_raw.read(path)["tensors"]
        names = [p["name"] for p in part["parameters"]]
        if sorted(names) != sorted(got):
            extra = sorted(set(got) ^ set(names))
            return f"{pid}: file and map disagree on {extra[0]}"
        for prm in part["parameters"]:
            data = got[prm["name"]][2]
            for pc in prm["pieces"]:
                chunk = data[pc["offset"] : pc["offset"] + pc["nbytes"]]
                if pc["fragment"] is None:
                    if chunk.strip(b"\0"):
                        return f"{pid} {prm['name']}: padding not zero"
                    continue
                fr = frags[pc["fragment"]]
                want = _box(orig[fr["tensor_id"]], fr["global_offset"], fr["local_shape"])
                if chunk != want:
                    return (f"{pid} {prm['name']}: bytes [{pc['offset']}, "
                            f"{pc['offset'] + pc['nbytes']}) are not box "
                            f"{fr['global_offset']}+{fr['local_shape']} of {fr['tensor_id']}")
    return None


def _run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
    return p.returncode, p.stdout, (msg[-1] if msg else "")[:600]


def _state_dict_equal(a, b):
    import torch

    if list(a) != list(b) and sorted(a) != sorted(b):
        only = sorted(set(a) ^ set(b))
        return f"state dict keys differ: {only[:3]}"
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{k}: {y.dtype} {list(y.shape)}, original {x.dtype} {list(x.shape)}"
        if not torch.equal(x.view(torch.uint8) if x.numel() else x,
                           y.view(torch.uint8) if y.numel() else y):
            return f"{k}: values differ"
    return None


def _from_pretrained(d):
    import torch
    import transformers

    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _tp_sizes(arch):
    return [1, 2]


MTP_ARCHS = ("deepseek-v3", "glm4-moe")


def cases():
    """(id, arch, tied, original_format, mtp) of every hf case."""
    out = []
    for arch in tiny_models.SPECS:
        if arch in ("llama-v100", "deepseek-v3-nomtp"):
            continue
        ties = [False, True] if arch in ("llama", "qwen3", "qwen3-moe") else [False]
        fmts = [True, False] if arch in tiny_models.MOE else [True]
        mtps = [False, True] if arch in MTP_ARCHS else [False]
        for tied in ties:
            for fmt in fmts:
                for mtp in mtps:
                    cid = (f"hf-{arch}{'-tied' if tied else ''}"
                           f"-{'original' if fmt else 'fused'}{'-mtp' if mtp else ''}")
                    out.append((cid, arch, tied, fmt, mtp))
    return out


def run_case(cid, arch, tied, fmt, mtp, work, reshard):
    d = os.path.join(work, cid)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpt = os.path.join(d, "ckpt")
    res = {"id": cid, "arch": arch, "tied": tied, "mtp": mtp,
           "save_format": "original" if fmt else "fused", "steps": {}}
    steps = res["steps"]
    try:
        model = tiny_models.build(arch, tied=tied)
        cfg = tiny_models.save(model, ckpt, original_format=fmt)
        if mtp:
            res["mtp_tensors"] = len(tiny_models.add_mtp(ckpt))
    except Exception as e:  # noqa: BLE001 - reported
        res["result"] = "not written by transformers"
        res["message"] = f"{type(e).__name__}: {e}"[:600]
        return res
    res["architecture"] = cfg.get("architectures", ["?"])[0]
    orig = read_checkpoint(ckpt)
    res["tensors"] = len(orig)
    # The reference: what from_pretrained makes of the original directory
    # (and, as a note, whether that is the model saved bit for bit).
    mine = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        ref = _from_pretrained(ckpt)
        why = _state_dict_equal(mine, ref)
        res["transformers_reload"] = "bit-exact" if why is None else "differs: " + why
    except Exception as e:  # noqa: BLE001
        ref = mine
        res["transformers_reload"] = f"error: {type(e).__name__}: {e}"[:300]

    def step(name, fn):
        try:
            steps[name] = fn()
        except Exception as e:  # noqa: BLE001
            steps[name] = f"harness error: {type(e).__name__}: {e}"[:300]

    cfgp = os.path.join(ckpt, "config.json")
    lay = os.path.join(d, "tp2.json")

    def layout():
        rc, _, msg = _run([reshard, "hf", "layout", cfgp, "--tp", "2",
                           "--checkpoint", ckpt, "-o", lay])
        return "ok" if rc == 0 else "refused: " + msg

    def hf_reshard():
        if not os.path.exists(lay):
            return "skipped (no layout)"
        out = os.path.join(d, "resharded")
        rc, _, msg = _run([reshard, "hf", "reshard", ckpt, lay, out])
        if rc != 0:
            return "refused: " + msg
        why = compare_tensors(orig, read_checkpoint(out))
        if why:
            return "mismatch: " + why
        if not os.path.exists(os.path.join(out, "config.json")):
            return "ok (bit-exact; no config.json beside the output)"
        return "ok"

    def import_export():
        store = os.path.join(d, "store")
        rc, out, msg = _run([reshard, "hf", "import", ckpt, "fs://" + store,
                             "--revision", "r1", "--json"])
        if rc != 0:
            return "refused (import): " + msg
        key = json.loads(out)["manifest_key"]
        exp = os.path.join(d, "export")
        rc, _, msg = _run([reshard, "hf", "export", "fs://" + store, key, exp])
        if rc != 0:
            return "refused (export): " + msg
        why = compare_tensors(orig, read_checkpoint(exp))
        if why:
            return "mismatch: " + why
        if not os.path.exists(os.path.join(exp, "config.json")):
            return "bit-exact, but the export has no config.json (not loadable)"
        try:
            why = _state_dict_equal(ref, _from_pretrained(exp))
        except Exception as e:  # noqa: BLE001
            return f"bit-exact, but from_pretrained(export) fails: {type(e).__name__}: {e}"[:400]
        if why:
            return "from_pretrained(export) differs: " + why
        return "ok"

    def engine_load(tp, ep=1):
        grid = ["--tp", str(tp), "--ep", str(ep)]

        def f():
            out = os.path.join(d, f"engine-hf-tp{tp}-ep{ep}")
            rc, _, msg = _run([reshard, "engine", "load", ckpt, "--engine", "hf",
                               "-o", out] + grid)
            if rc != 0:
                return "refused: " + msg
            files = sorted(glob.glob(os.path.join(out, "*.safetensors")))
            if tp == 1:
                if len(files) != 1:
                    return f"mismatch: {len(files)} files at TP 1"
                why = compare_tensors(orig, read_checkpoint(out))
                return "ok" if why is None else "mismatch: " + why
            # TP > 1: every piece of every parameter holds the bytes of its
            # placement fragment, the box of the original tensor that
            # engine layout names for it.
            pl = os.path.join(d, f"hf-tp{tp}-ep{ep}.placement.json")
            pm = os.path.join(d, f"hf-tp{tp}-ep{ep}.params.json")
            rc, _, msg = _run([reshard, "engine", "layout", cfgp, "--engine", "hf",
                               "--checkpoint", ckpt, "-o", pl, "--params", pm] + grid)
            if rc != 0:
                return "refused (engine layout): " + msg
            why = check_engine_files(orig, pl, pm, out)
            if why:
                return "mismatch: " + why
            return "ok"
        return f

    step("hf layout tp2", layout)
    step("hf reshard tp2", hf_reshard)
    step("hf import/export", import_export)
    step("engine load hf tp1", engine_load(1))
    step("engine load hf tp2", engine_load(2))
    if arch in tiny_models.MOE:
        step("engine load hf tp2 ep2", engine_load(2, 2))
    vals = list(steps.values())
    if all(v == "ok" for v in vals):
        res["result"] = "accepted"
    elif any(v.startswith("refused") for v in vals):
        res["result"] = "refused"
        res["message"] = next(f"{k}: {v}" for k, v in steps.items()
                              if v.startswith("refused"))
    else:
        res["result"] = "mismatch"
        res["message"] = next(f"{k}: {v}" for k, v in steps.items() if v != "ok")
    return res
