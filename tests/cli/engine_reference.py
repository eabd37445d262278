"""What vLLM and Megatron-Core hold per rank after loading a Hugging Face
checkpoint: an independent numpy statement of the layouts in
shared/reference/engine-layouts-{vllm,megatron}.md (cited below as
[vllm §...] and [mcore §...]), used to check `reshard engine load` byte for
byte. Written from those documents only, not from reshard's sources.

    expected(tensors, cfg, engine, tp, pp, ep, dp, vocab_multiple)
        -> {participant_id: {param_name: (st_dtype, shape_list, bytes)}}

`tensors` is what hf_checkpoints.read_checkpoint returns. Every tensor is
handled as an array of shape [*shape, itemsize], so slicing rows/columns
and concatenating never looks at the element type; `python3
engine_reference.py` runs the self-check (main) on traced byte ids.
"""

import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402

# Megatron holds unquantized weights: DeepSeek-V3 without FP8 (model_tensors
# then writes every linear weight in torch_dtype, without scales).
DEEPSEEK_V3_BF16 = {k: v for k, v in hfc.CONFIGS["deepseek_v3"].items()
                    if k != "quantization_config"}

ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
         "Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM",
         "Glm4MoeForCausalLM")
LLAMA_LIKE = ARCHS[:3]
# [vllm] glm4_moe.py (vLLM 0.33): Glm4MoE's GateLinear with params_dtype
# float32, so the router weight is float32 whatever the model dtype.
GLM = "Glm4MoeForCausalLM"


def _refuse(cond, why):
    if cond:
        raise ValueError(why)


def _div(a, b, what):
    _refuse(b <= 0 or a % b, "%s: %d is not divisible by %d" % (what, a, b))
    return a // b


def _chunk(x, t, n, axis=0, what="split"):
    """Chunk t of n equal contiguous pieces along `axis`."""
    k = _div(x.shape[axis], n, what)
    return x[(slice(None),) * axis + (slice(t * k, (t + 1) * k),)]


def _cat(*xs):
    return np.concatenate(xs, axis=0)


class _Model:
    """Sizes of a config, in both documents' terms."""

    def __init__(self, cfg):
        self.cfg, self.arch = cfg, cfg["architectures"][0]
        _refuse(self.arch not in ARCHS, "unsupported " + self.arch)
        self.V, self.L = cfg["vocab_size"], cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.K = cfg.get("num_key_value_heads") or self.H
        self.mla = self.arch == "DeepseekV3ForCausalLM"
        # DeepSeek-V3 and GLM-4.5: first_k_dense_replace dense layers, then
        # MoE with shared experts; MTP layers past num_hidden_layers.
        self.deepseek_moe = self.mla or self.arch == GLM
        self.E = (cfg.get("num_experts") or cfg.get("num_local_experts")
                  or cfg.get("n_routed_experts") or 0)
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        q = cfg.get("quantization_config") or {}
        self.block = (q.get("weight_block_size")
                      if q.get("quant_method") == "fp8" else None)
        self.mtp = (cfg.get("num_nextn_predict_layers", 0)
                    if self.deepseek_moe else 0)

    def moe_layer(self, i):
        """[vllm] per-architecture table; [mcore §6] which layers are MoE."""
        c = self.cfg
        if self.arch == "MixtralForCausalLM":
            return True
        if self.arch == "Qwen3MoeForCausalLM":
            return not (i in c.get("mlp_only_layers", [])
                        or (i + 1) % c.get("decoder_sparse_step", 1))
        if self.deepseek_moe:
            return (i >= c["first_k_dense_replace"]
                    and i % c.get("moe_layer_freq", 1) == 0)
        return False

    def experts(self, i):
        """(HF prefix of the MoE block, gate, up, down names of one expert)."""
        p = "model.layers.%d." % i
        if self.arch == "MixtralForCausalLM":
            return p + "block_sparse_moe.", "w1", "w3", "w2"
        return p + "mlp.", "gate_proj", "up_proj", "down_proj"


def _vocab_rows(A, name, t, tp, Vp, V, padding_only=False):
    """Rows [t*Vp/tp, (t+1)*Vp/tp) of the table padded to Vp rows with
    zeros ([vllm] VocabParallelEmbedding, [mcore §3]); a share that is all
    padding is all zeros with `padding_only` (vLLM), else refused."""
    dt, W = A[name]
    per = _div(Vp, tp, "padded vocabulary over tp")
    lo = t * per
    _refuse(lo >= V and not padding_only,
            "tp rank %d holds only vocabulary padding" % t)
    real = W[min(lo, V):min(lo + per, V)]
    pad = np.zeros((per - len(real),) + W.shape[1:], W.dtype)
    return dt, _cat(real, pad)


# ------------------------------------------------------------------ vLLM

def _pp_indices(L, p, pp):
    """[vllm] Pipeline parallelism, get_pp_indices: L//pp each, remainder one
    each to the stages before the last, counting back from the 2nd-to-last."""
    parts = [L // pp] * pp
    for k in range(2, L % pp + 2):
        parts[-k] += 1
    _refuse(min(parts) == 0, "a pipeline stage without layers")
    return range(sum(parts[:p]), sum(parts[:p + 1]))


def _vllm_rank(A, m, p, t, e, tp, pp, ep, routed=True, sp=False, d=0, dp=1):
    out, blk = {}, m.block
    # [vllm] FusedMoE: without EP it flattens TP across DP (tp_size dp*tp,
    # rank d*tp + t).
    moe_tp, moe_r = (1, 0) if ep > 1 else (dp * tp, d * tp + t)

    def whole(name):  # replicated: norms, routers, correction bias
        out[name] = A[name]

    def column(name, pieces, split):
        """[vllm] Merged/QKV/ColumnParallelLinear: rows chunk `src` of
        `parts` of each HF piece, concatenated; Block FP8: scale rows of each
        piece, concatenated shard by shard; partitions must be whole blocks
        (all when split over TP, all but the last when not)."""
        ws, ss, sdt = [], [], None
        for k, (hf, src, parts) in enumerate(pieces):
            dt, W = A[hf]
            ws.append(_chunk(W, src, parts, 0, name))
            sname = hf[:-len("weight")] + "weight_scale_inv"
            if hf.endswith("weight") and sname in A:
                rows = W.shape[0] // parts
                _refuse(rows % blk[0] and (split or k < len(pieces) - 1),
                        "FP8 block %s: %s partition of %d rows"
                        % (blk, name, rows))
                sdt, S = A[sname]
                sb = -(-rows // blk[0])
                ss.append(S[src * sb:(src + 1) * sb])
        out[name + "." + pieces[0][0].rsplit(".", 1)[1]] = (dt, _cat(*ws))
        if ss:
            out[name + ".weight_scale_inv"] = (sdt, _cat(*ss))

    def row(name, hf, r=None, parts=None):
        """[vllm] RowParallelLinear: columns chunk t; FP8 scale columns
        (chunk r of `parts` where given: disable_tp is chunk 0 of 1)."""
        r, parts = (t, tp) if r is None else (r, parts)
        dt, W = A[hf + ".weight"]
        out[name + ".weight"] = (dt, _chunk(W, r, parts, 1, name))
        if hf + ".weight_scale_inv" in A:
            _refuse(parts > 1 and W.shape[1] // parts % blk[1],
                    "FP8 block %s: %s input partition" % (blk, name))
            sdt, S = A[hf + ".weight_scale_inv"]
            out[name + ".weight_scale_inv"] = (sdt, _chunk(S, r, parts, 1))

    def fused_moe(hf, gate, up, down, ids):
        """[vllm] FusedMoE: w13 [E_local, 2*I_local, h] = per expert [gate
        rows; up rows], w2 [E_local, h, I_local] = down columns, chunk moe_r
        of moe_tp; Block FP8: w13/w2_weight_scale_inv split the same way."""
        for suf in ("weight", "weight_scale_inv"):
            def f(g, n, ax=0):  # expert g's tensor n, chunk moe_r
                return _chunk(A[hf + "experts.%d.%s.%s" % (g, n, suf)][1],
                              moe_r, moe_tp, ax, hf)
            dt = {n: A.get(hf + "experts.0.%s.%s" % (n, suf), (None,))[0]
                  for n in (gate, down)}
            if dt[gate] is None:
                continue
            if suf != "weight":
                il = A[hf + "experts.0.%s.weight" % gate][1].shape[0] // moe_tp
                _refuse(il % blk[0] or (moe_tp > 1 and il % blk[1]),
                        "FP8 block %s: MoE I_local %d" % (blk, il))
            # [vllm] 0.33: FusedMoE's parameters under routed_experts
            x = hf + ("experts.routed_experts." if routed else "experts.")
            out[x + "w13_" + suf] = (dt[gate], np.stack(
                [_cat(f(g, gate), f(g, up)) for g in ids]))
            out[x + "w2_" + suf] = (dt[down], np.stack(
                [f(g, down, 1) for g in ids]))

    def mlp(hf, whole=False):  # dense or shared experts
        # [vllm] DeepseekV2MLP(disable_tp=is_sequence_parallel): whole.
        r, parts = (0, 1) if whole else (t, tp)
        column(hf + "gate_up_proj", [(hf + "gate_proj.weight", r, parts),
                                     (hf + "up_proj.weight", r, parts)],
               parts > 1)
        row(hf + "down_proj", hf + "down_proj", r, parts)

    for i in _pp_indices(m.L, p, pp):
        P = "model.layers.%d." % i  # vLLM keeps the global index
        whole(P + "input_layernorm.weight")
        whole(P + "post_attention_layernorm.weight")
        a = P + "self_attn."
        if m.mla:  # [vllm] DeepSeek-V3 MLA table
            column(a + "fused_qkv_a_proj", [(a + "q_a_proj.weight", 0, 1),
                   (a + "kv_a_proj_with_mqa.weight", 0, 1)], False)
            whole(a + "q_a_layernorm.weight")
            column(a + "q_b_proj", [(a + "q_b_proj.weight", t, tp)], tp > 1)
            whole(a + "kv_a_layernorm.weight")
            column(a + "kv_b_proj", [(a + "kv_b_proj.weight", t, tp)], tp > 1)
        else:  # [vllm] QKVParallelLinear: [q_r; k_s; v_s]
            if m.K >= tp:
                _div(m.K, tp, "kv heads over tp")
                s, kparts = t, tp
            else:
                s, kparts = t // _div(tp, m.K, "tp over kv heads"), m.K
            for suf in ("weight", "bias"):
                if a + "q_proj." + suf in A:
                    column(a + "qkv_proj", [(a + "q_proj." + suf, t, tp),
                           (a + "k_proj." + suf, s, kparts),
                           (a + "v_proj." + suf, s, kparts)], tp > 1)
            for n in ("q_norm.weight", "k_norm.weight"):
                if a + n in A:
                    whole(a + n)
        row(a + "o_proj", a + "o_proj")
        if m.moe_layer(i):
            hf, gate, up, down = m.experts(i)
            whole(hf + "gate.weight")
            if hf + "gate.e_score_correction_bias" in A:
                whole(hf + "gate.e_score_correction_bias")
            if m.deepseek_moe:
                mlp(hf + "shared_experts.", sp)
            if ep > 1:  # [vllm] determine_expert_map, "linear"
                base, rem = divmod(m.E, ep)
                start = e * base + min(e, rem)
                ids = range(start, start + base + (e < rem))
            else:
                ids = range(m.E)
            fused_moe(hf, gate, up, down, ids)
        else:
            mlp(P + "mlp.")

    # [vllm] Pipeline parallelism table: embed / norm / lm_head per stage
    first, last = p == 0, p == pp - 1
    every = m.arch in ("Qwen3MoeForCausalLM", "MixtralForCausalLM")
    Vp = -(-m.V // 64) * 64
    if first or every or (m.tied and last and m.arch in LLAMA_LIKE):
        out["model.embed_tokens.weight"] = _vocab_rows(
            A, "model.embed_tokens.weight", t, tp, Vp, m.V, True)
    if last or every:
        whole("model.norm.weight")
        if not m.tied:
            out["lm_head.weight"] = _vocab_rows(A, "lm_head.weight", t, tp,
                                                Vp, m.V, True)
    return out


# Engine specs of the vLLM layout (docs/engines.md): (MoE parameters under
# FusedMoE's routed_experts, router bias float32 whatever the model dtype).
VLLM_RELEASES = {"vllm": (True, True), "vllm@0.33": (True, True),
                 "vllm@<0.33": (False, True), "vllm@<0.10.2": (False, False),
                 "sglang": (False, True)}


def _vllm_check(m, tp, pp, ep, dp):
    _refuse(ep not in (1, tp * dp), "vLLM: ep must be 1 or tp*dp")
    _refuse(m.E and ep > m.E, "vLLM: an EP rank without experts")
    _refuse(m.arch == "Qwen3MoeForCausalLM" and tp > m.E,
            "Qwen3-MoE refuses tp > num_experts")


# -------------------------------------------------------------- Megatron

def _megatron_rank(A, m, p, t, e, tp, pp, ep, Vp):
    out = {}

    def put(name, hf):  # whole on every rank
        out[name] = A[hf]

    def rows(name, hf):  # ColumnParallelLinear: rows chunk t
        dt, W = A[hf]
        out[name] = (dt, _chunk(W, t, tp, 0, name))

    def cols(name, hf):  # RowParallelLinear: columns chunk t
        dt, W = A[hf]
        out[name] = (dt, _chunk(W, t, tp, 1, name))

    def gate_up(name, hf, gate, up, n=tp, k=t):
        """[mcore §5] linear_fc1 = [gate rows chunk k; up rows chunk k]."""
        dt, G = A[hf + gate + ".weight"]
        out[name] = (dt, _cat(_chunk(G, k, n, 0, name),
                              _chunk(A[hf + up + ".weight"][1], k, n)))

    def layer(pre, i):
        P = "model.layers.%d." % i
        a, sa = P + "self_attn.", pre + "self_attention."
        if m.mla:  # [mcore §7] table
            put(pre + "input_layernorm.weight", P + "input_layernorm.weight")
            put(sa + "linear_q_down_proj.weight", a + "q_a_proj.weight")
            put(sa + "linear_q_up_proj.layer_norm_weight",
                a + "q_a_layernorm.weight")
            rows(sa + "linear_q_up_proj.weight", a + "q_b_proj.weight")
            put(sa + "linear_kv_down_proj.weight",
                a + "kv_a_proj_with_mqa.weight")
            put(sa + "linear_kv_up_proj.layer_norm_weight",
                a + "kv_a_layernorm.weight")
            rows(sa + "linear_kv_up_proj.weight", a + "kv_b_proj.weight")
        else:  # [mcore §4] per query group [q heads; k; v], chunk t
            g = m.K
            _refuse(g % tp, "Megatron: %d query groups over tp %d" % (g, tp))
            put(sa + "linear_qkv.layer_norm_weight",
                P + "input_layernorm.weight")
            for suf in ("weight", "bias"):
                if a + "q_proj." + suf not in A:
                    continue
                dt, Q = A[a + "q_proj." + suf]
                grouped = [x.reshape((g, -1) + x.shape[1:]) for x in
                           (Q, A[a + "k_proj." + suf][1],
                            A[a + "v_proj." + suf][1])]
                fused = np.concatenate(grouped, axis=1)
                fused = fused.reshape((-1,) + fused.shape[2:])
                out[sa + "linear_qkv." + suf] = (dt, _chunk(fused, t, tp))
            for hfn, mn in (("q_norm", "q_layernorm"),
                            ("k_norm", "k_layernorm")):
                if a + hfn + ".weight" in A:
                    put(sa + mn + ".weight", a + hfn + ".weight")
        cols(sa + "linear_proj.weight", a + "o_proj.weight")
        norm2 = P + "post_attention_layernorm.weight"
        if m.moe_layer(i):  # [mcore §6]
            hf, gate, up, down = m.experts(i)
            put(pre + "pre_mlp_layernorm.weight", norm2)
            put(pre + "mlp.router.weight", hf + "gate.weight")
            if hf + "gate.e_score_correction_bias" in A:
                put(pre + "mlp.router.expert_bias",
                    hf + "gate.e_score_correction_bias")
            per = _div(m.E, ep, "experts over ep")
            for k in range(per):  # TEGroupedMLP, ETP = 1: whole experts
                x = hf + "experts.%d." % (e * per + k)
                gate_up(pre + "mlp.experts.linear_fc1.weight%d" % k, x,
                        gate, up, 1, 0)
                put(pre + "mlp.experts.linear_fc2.weight%d" % k,
                    x + down + ".weight")
            if m.mla:  # SharedExpertMLP: dense TP
                s = hf + "shared_experts."
                gate_up(pre + "mlp.shared_experts.linear_fc1.weight", s,
                        "gate_proj", "up_proj")
                cols(pre + "mlp.shared_experts.linear_fc2.weight",
                     s + "down_proj.weight")
        else:  # [mcore §5] dense: post-attention norm fused into fc1
            put(pre + "mlp.linear_fc1.layer_norm_weight", norm2)
            gate_up(pre + "mlp.linear_fc1.weight", P + "mlp.", "gate_proj",
                    "up_proj")
            cols(pre + "mlp.linear_fc2.weight", P + "mlp.down_proj.weight")

    # [mcore §2] even split, stage-local numbering
    per = m.L // pp
    for j in range(per):
        layer("decoder.layers.%d." % j, p * per + j)
    embed = "model.embed_tokens.weight"
    if p == 0:  # [mcore §3]
        out["embedding.word_embeddings.weight"] = _vocab_rows(
            A, embed, t, tp, Vp, m.V)
    if p == pp - 1:
        put("decoder.final_layernorm.weight", "model.norm.weight")
        if not m.tied or pp > 1:  # tied, P == 1: no output weight
            out["output_layer.weight"] = _vocab_rows(
                A, embed if m.tied else "lm_head.weight", t, tp, Vp, m.V)
        for k in range(m.mtp):  # [mcore §8] MTP layer k = HF layer L+k
            P, M = "model.layers.%d." % (m.L + k), "mtp.layers.%d." % k
            put(M + "enorm.weight", P + "enorm.weight")
            put(M + "hnorm.weight", P + "hnorm.weight")
            rows(M + "eh_proj.weight", P + "eh_proj.weight")
            layer(M + "mtp_model_layer.", m.L + k)
            put(M + "final_layernorm.weight", P + "shared_head.norm.weight")
        if m.mtp and pp > 1:  # the last stage's own embedding copy
            out["embedding.word_embeddings.weight"] = _vocab_rows(
                A, embed, t, tp, Vp, m.V)
    return out


def _megatron_check(m, tp, pp, ep, dp):
    _refuse(m.block, "Megatron holds unquantized weights: FP8 checkpoint")
    _refuse((tp * dp) % ep, "Megatron: ep must divide tp*dp")
    _refuse(m.E and m.E % ep, "Megatron: experts not divisible by ep")
    _refuse(m.L % pp, "Megatron: %d layers over pp %d" % (m.L, pp))


# ---------------------------------------------------------------- driver

def layout(A, cfg, engine, tp=1, pp=1, ep=1, dp=1, vocab_multiple=None):
    """{participant_id: {param: (st_dtype, array [*shape, itemsize])}} for
    A = {hf_name: (st_dtype, array [*shape, itemsize])} (any element type,
    so the self-check can trace byte ids through it)."""
    m = _Model(cfg)
    _refuse(min(tp, pp, ep, dp) < 1, "sizes must be positive")
    if engine in VLLM_RELEASES:
        _vllm_check(m, tp, pp, ep, dp)
        coord = lambda d, t: d * tp + t if ep > 1 else 0  # noqa: E731
        # [vllm] use_sequence_parallel_moe under the default all2all
        # backend: EP, tp > 1 and dp > 1.
        sp = ep > 1 and tp > 1 and dp > 1
        build = lambda p, t, e, d: _vllm_rank(  # noqa: E731
            A, m, p, t, e, tp, pp, ep, VLLM_RELEASES[engine][0], sp, d, dp)
        # Without EP the DP replicas hold different parts of the experts.
        by_d = bool(m.E) and ep == 1 and dp > 1
    elif engine == "megatron":
        _megatron_check(m, tp, pp, ep, dp)
        mult = tp * (vocab_multiple or 128)
        Vp = -(-m.V // mult) * mult  # [mcore §3] vocab_size_with_padding
        coord = lambda d, t: (d * tp + t) % ep  # noqa: E731
        build = lambda p, t, e, d: _megatron_rank(  # noqa: E731
            A, m, p, t, e, tp, pp, ep, Vp)
        by_d = False
    else:
        raise ValueError("unknown engine " + repr(engine))
    _div(m.H, tp, "attention heads over tp")  # both engines
    held, out = {}, {}  # dp replicas with the same (p, e, t) share bytes
    for d in range(dp):
        for p in range(pp):
            for t in range(tp):
                e = coord(d, t)
                key = (p, e, t, d if by_d else 0)
                if key not in held:
                    held[key] = build(p, t, e, d)
                out["p-d%d-p%d-e%d-t%d" % (d, p, e, t)] = held[key]
    return out


# [vllm] BaseKVCacheMethod.create_weights (vLLM 0.33, kv_cache.py): with
# a block-FP8 quant config every Attention module (not DeepSeek's
# MLAAttention) registers q_scale, k_scale, v_scale, prob_scale: 0-dim,
# torch.tensor(-1.0) under the model dtype, which load_weights leaves when
# the checkpoint holds no KV-cache scales. SGLang registers others.
KV_CACHE_SCALES = ("q_scale", "k_scale", "v_scale", "prob_scale")
MINUS_ONE = {"BF16": b"\x80\xbf", "F16": b"\x00\xbc",
             "F32": b"\x00\x00\x80\xbf"}


def _kv_cache_scales(tensors, cfg, engine, params):
    """{name: (st_dtype, [], bytes)} of the KV-cache scales of the rank
    holding `params`."""
    m = _Model(cfg)
    if engine not in VLLM_RELEASES or engine == "sglang" or m.mla or \
            not m.block:
        return {}
    out = {}
    for n in params:
        x = re.fullmatch(r"(model\.layers\.\d+\.)self_attn\.o_proj\.weight", n)
        if x:
            dt = tensors[x.group(1) + "input_layernorm.weight"][0]
            for s in KV_CACHE_SCALES:
                out[x.group(1) + "self_attn.attn." + s] = (dt, [],
                                                           MINUS_ONE[dt])
    return out


def _widen(dt, b):
    """16-bit float bytes as float32 bytes, exactly."""
    x = np.frombuffer(b, "<u2").astype(np.uint32)
    if dt == "BF16":
        return (x << 16).astype("<u4").tobytes()
    return np.frombuffer(b, "<f2").astype("<f4").tobytes()


def expected(tensors, cfg, engine, tp=1, pp=1, ep=1, dp=1,
             vocab_multiple=None):
    """{participant_id: {param_name: (st_dtype, shape_list, bytes)}}.
    Router biases are float32 where the engine keeps them so, and vLLM's
    GLM-4.5 router weight: a 16-bit checkpoint's are widened exactly. vLLM's KV-cache scales (constants of
    no checkpoint tensor) are added here, after `layout`, whose arrays
    trace checkpoint bytes."""
    f32_bias = engine == "megatron" or VLLM_RELEASES.get(engine, (0, 0))[1]
    f32_gate = engine.startswith("vllm") and cfg["architectures"][0] == GLM
    tensors = dict(tensors)
    for n, (dt, shape, b) in list(tensors.items()):
        if ((f32_bias and n.endswith(".gate.e_score_correction_bias")) or
                (f32_gate and n.endswith(".mlp.gate.weight"))) and \
                dt in ("BF16", "F16"):
            tensors[n] = ("F32", shape, _widen(dt, b))
    A = {n: (dt, np.frombuffer(b, np.uint8).reshape(
        list(shape) + [hfc.ITEMSIZE[dt]])) for n, (dt, shape, b) in
        tensors.items()}
    got = layout(A, cfg, engine, tp, pp, ep, dp, vocab_multiple)
    return {pid: dict({n: (dt, list(x.shape[:-1]), np.ascontiguousarray(x)
                           .tobytes()) for n, (dt, x) in params.items()},
                      **_kv_cache_scales(tensors, cfg, engine, params))
            for pid, params in got.items()}


# ------------------------------------------------------------ self-check

def _traced(tensors):
    """The checkpoint with every byte replaced by its global id (from 1),
    and table[id] = that byte (table[0] = 0, the padding)."""
    A, starts, at = {}, {}, 1
    for n, (dt, shape, b) in sorted(tensors.items()):
        A[n] = (dt, np.arange(at, at + len(b), dtype=np.int64).reshape(
            list(shape) + [hfc.ITEMSIZE[dt]]))
        starts[n], at = at, at + len(b)
    table = np.zeros(at, np.uint8)
    for n, s in starts.items():
        table[s:s + len(tensors[n][2])] = np.frombuffer(tensors[n][2],
                                                        np.uint8)
    return A, starts, table


def _skipped(name, cfg, engine):
    """HF tensors the engine does not load."""
    m = _Model(cfg)
    mtp = name.startswith("model.layers.") and int(name.split(".")[2]) >= m.L
    return (name.endswith(hfc.BUFFER_SUFFIX)
            or (name == "lm_head.weight" and m.tied)
            or (engine in VLLM_RELEASES and mtp)  # [vllm] DeepSeek MTP
            or (mtp and name.endswith(("embed_tokens.weight",
                                       "shared_head.head.weight"))))


ROW_PARALLEL = re.compile(r"(o_proj|down_proj|linear_proj|linear_fc2)\.weight"
                          r"|w2_weight")


def _check(tensors, cfg, engine, **grid):
    A, starts, table = _traced(tensors)
    names = sorted(starts)
    first = np.array([starts[n] for n in names])
    traced = layout(A, cfg, engine, **grid)
    real = expected(tensors, cfg, engine, **grid)
    tp, pp, dp = (grid.get(k, 1) for k in ("tp", "pp", "dp"))
    assert set(real) == set(traced) and len(real) == tp * pp * dp
    seen = np.zeros(len(table), bool)
    seen_d = {d: np.zeros(len(table), bool) for d in range(dp)}
    dense = {}  # (p, t, name) -> bytes of a non-routed-expert parameter
    for pid, params in traced.items():
        d, p, _, t = (int(f[1:]) for f in pid.split("-")[1:])
        for pname, (dt, x) in params.items():
            rdt, shape, b = real[pid][pname]
            isz = hfc.ITEMSIZE[dt]
            assert rdt == dt and list(x.shape) == shape + [isz], pname
            assert len(b) == int(np.prod(shape)) * isz, pname
            ids = x.reshape(-1)
            # the bytes are the traced ones; padding (id 0) is zero bytes
            assert np.array_equal(np.frombuffer(b, np.uint8), table[ids])
            # whole elements of tensors of the parameter's dtype, none twice
            el = x.reshape(-1, isz)
            el = el[el[:, 0] > 0]
            assert (el == el[:, :1] + np.arange(isz)).all(), pname
            src = first.searchsorted(el[:, 0], side="right") - 1
            assert ((el[:, 0] - first[src]) % isz == 0).all(), pname
            assert all(A[names[s]][0] == dt for s in np.unique(src)), pname
            assert len(np.unique(el[:, 0])) == len(el), pname
            # row-parallel layers keep the output dim whole, all others the
            # input dim (catches a split along the wrong axis)
            S = A[names[src[0]]][1].shape[:-1] if len(el) else ()
            if len(S) > 1 and len(shape) > 1:
                ax = -2 if ROW_PARALLEL.search(pname) else -1
                assert shape[ax] == S[ax], (pid, pname, shape, S)
            seen[ids] = seen_d[d][ids] = True
            if "experts.w" not in pname and ".experts.linear" not in pname:
                prev = dense.setdefault((p, t, pname), b)
                assert prev == b, (pid, pname, "differs across d or e")
    for n in names:
        span = slice(starts[n], starts[n] + len(tensors[n][2]))
        if _skipped(n, cfg, engine):
            assert not seen[span].any(), (n, "loaded")
            continue
        assert seen[span].all(), (n, "not covered")
        if not (".experts." in n and ".shared_experts." not in n):
            for d in range(dp):  # every replica holds the dense weights
                assert seen_d[d][span].all(), (n, "not in replica", d)
    return A, traced


CASES = {
    "vllm": [
        ("llama", {}), ("llama", dict(tp=2, pp=2)),
        ("llama", dict(tp=4, dp=2)),
        ("llama", dict(tp=2, pp=3)), ("llama_v40", dict(tp=2)),
        # vLLM's padding-only ranks: 40 rows padded to 64, TP 4 rank 3.
        ("llama_v40", dict(tp=4)), ("llama_v40", dict(tp=4, pp=2)),
        ("qwen2", dict(tp=2, pp=2)), ("qwen2", dict(tp=4)),
        ("qwen3", dict(tp=4, pp=2)), ("qwen3_quirks", dict(tp=2)),
        ("qwen3_quirks", dict(tp=4, pp=2)), ("qwen3_moe", dict(tp=2, pp=2)),
        ("qwen3_moe", dict(tp=2, dp=2, ep=4)), ("qwen3_moe", dict(dp=3, ep=3)),
        ("qwen3_moe", dict(tp=4)), ("mixtral", dict(tp=2)),
        ("mixtral", dict(tp=2, ep=2, pp=2)), ("deepseek_v3", {}),
        ("deepseek_v3", dict(tp=2, pp=2)), ("deepseek_v3", dict(pp=3)),
        ("deepseek_v3", dict(tp=2, dp=2, ep=4)),
        # Without EP FusedMoE flattens TP across DP: rank d*tp + t of dp*tp.
        ("qwen3_moe", dict(tp=2, dp=2)), ("qwen3_moe", dict(dp=2, pp=2)),
        ("mixtral", dict(tp=2, dp=2)), ("deepseek_v3_bf16", dict(dp=4)),
    ],
    "vllm@<0.33": [("qwen3_moe", dict(tp=2)), ("deepseek_v3", dict(tp=2))],
    "sglang": [("mixtral", dict(tp=2, ep=2))],
    "megatron": [
        ("llama", {}), ("llama", dict(tp=2, pp=2, dp=2, vocab_multiple=8)),
        ("llama", dict(tp=2, pp=4, vocab_multiple=1)), ("qwen2", {}),
        ("qwen2", dict(tp=2, pp=2, vocab_multiple=16)),
        ("qwen3", dict(tp=2, vocab_multiple=1)),
        ("qwen3_quirks", dict(tp=2, pp=2, vocab_multiple=8)),
        ("qwen3_moe", dict(tp=2, ep=2, vocab_multiple=8)),
        ("qwen3_moe", dict(dp=4, ep=4, pp=3)),
        ("qwen3_moe", dict(tp=2, dp=2, ep=4, vocab_multiple=8)),
        ("mixtral", dict(tp=2, vocab_multiple=8)),
        ("mixtral", dict(tp=2, dp=2, ep=4, vocab_multiple=8)),
        ("deepseek_v3_bf16", {}),
        ("deepseek_v3_bf16", dict(tp=2, pp=3, ep=2, vocab_multiple=8)),
        ("deepseek_v3_bf16", dict(tp=4, dp=2, ep=4, vocab_multiple=4)),
    ],
}

REFUSED = [
    ("vllm", "deepseek_v3", dict(tp=4), "q_b_proj partition of 12 rows"),
    ("vllm", "deepseek_v3_moe12", {}, "MoE I_local 12"),
    ("vllm", "llama", dict(tp=2, ep=3), "ep must be 1 or tp*dp"),
    ("vllm", "qwen3_moe", dict(dp=3), "not divisible by 3"),
    ("vllm", "qwen3_moe", dict(tp=8), "num_experts"),
    ("vllm", "qwen3_moe", dict(dp=8, ep=8), "without experts"),
    ("megatron", "llama", dict(tp=4, vocab_multiple=1), "query groups"),
    ("megatron", "llama", dict(tp=2), "only vocabulary padding"),
    ("megatron", "deepseek_v3", {}, "FP8"),
    ("megatron", "llama", dict(pp=3), "layers over pp"),
    ("megatron", "mixtral", dict(tp=2, ep=4), "ep must divide"),
    ("megatron", "mixtral", dict(dp=3, ep=3), "experts not divisible"),
    ("vllm@0.34", "llama", {}, "unknown engine"),
]


def _spot_checks(ckpts):
    """A few layouts written out by hand from the docs' statements."""
    def run(engine, key, **grid):
        A, got = _check(ckpts[key][1], ckpts[key][0], engine, **grid)
        return (lambda n: A[n][1]), got
    # [vllm] get_pp_indices example: 61 layers, pp 4 -> 15, 15, 16, 15
    assert [len(_pp_indices(61, p, 4)) for p in range(4)] == [15, 15, 16, 15]
    # which stage holds what (layers as "model.i" / "decoder.j" / "mtp.k"):
    # [vllm] Pipeline parallelism, [mcore §2, §3, §8]
    def stages(engine, key, **grid):
        got = run(engine, key, **grid)[1]
        short = lambda n: (".".join(n.split(".")[0:3:2])  # noqa: E731
                           if "layers." in n else n.split(".")[-2])
        return [{short(n) for n in got["p-d0-p%d-e0-t0" % p]}
                for p in range(grid.get("pp", 1))]
    assert stages("vllm", "llama", pp=3) == [
        {"embed_tokens", "model.0"}, {"model.1", "model.2"},
        {"model.3", "norm", "lm_head"}]
    assert stages("vllm", "qwen2", pp=2) == [  # tied: embedding twice
        {"embed_tokens", "model.0"}, {"embed_tokens", "model.1", "norm"}]
    assert stages("vllm", "mixtral", pp=2) == [
        {"embed_tokens", "model.%d" % p, "norm", "lm_head"} for p in (0, 1)]
    assert stages("vllm", "deepseek_v3", pp=2) == [  # MTP not loaded
        {"embed_tokens", "model.0", "model.1"}, {"model.2", "norm", "lm_head"}]
    assert stages("megatron", "qwen2", vocab_multiple=1) == [
        {"word_embeddings", "decoder.0", "decoder.1", "final_layernorm"}]
    assert stages("megatron", "qwen2", pp=2, vocab_multiple=1) == [
        {"word_embeddings", "decoder.0"},
        {"decoder.0", "final_layernorm", "output_layer"}]
    assert stages("megatron", "deepseek_v3_bf16", pp=3) == [
        {"word_embeddings", "decoder.0"}, {"decoder.0"},
        {"decoder.0", "final_layernorm", "output_layer", "mtp.0",
         "word_embeddings"}]
    # DeepSeek-V3 MoE layer 1 at tp 2 (h 32, H 4, ql 16, kl 16, nope 8,
    # rope 4, v 8, Fe 16, Fs 16, E 4, FP8 blocks 8x8): [vllm] MLA table,
    # Block FP8, FusedMoE; [mcore §6, §7]
    def shapes(engine, key, pre, **grid):
        got = run(engine, key, tp=2, **grid)[1]["p-d0-p0-e0-t0"]
        return {n[len(pre):]: list(x.shape[:-1]) for n, (_, x) in got.items()
                if n.startswith(pre)}
    W, S = ".weight", ".weight_scale_inv"
    assert shapes("vllm", "deepseek_v3", "model.layers.1.") == {
        "input_layernorm" + W: [32], "post_attention_layernorm" + W: [32],
        "self_attn.fused_qkv_a_proj" + W: [36, 32],
        "self_attn.fused_qkv_a_proj" + S: [5, 4],
        "self_attn.q_a_layernorm" + W: [16], "self_attn.kv_a_layernorm" + W:
        [16], "self_attn.q_b_proj" + W: [24, 16], "self_attn.q_b_proj" + S:
        [3, 2], "self_attn.kv_b_proj" + W: [32, 16],
        "self_attn.kv_b_proj" + S: [4, 2], "self_attn.o_proj" + W: [32, 16],
        "self_attn.o_proj" + S: [4, 2], "mlp.gate" + W: [4, 32],
        "mlp.gate.e_score_correction_bias": [4],
        "mlp.shared_experts.gate_up_proj" + W: [16, 32],
        "mlp.shared_experts.gate_up_proj" + S: [2, 4],
        "mlp.shared_experts.down_proj" + W: [32, 8],
        "mlp.shared_experts.down_proj" + S: [4, 1],
        "mlp.experts.routed_experts.w13_weight": [4, 16, 32],
        "mlp.experts.routed_experts.w13_weight_scale_inv": [4, 2, 4],
        "mlp.experts.routed_experts.w2_weight": [4, 32, 8],
        "mlp.experts.routed_experts.w2_weight_scale_inv": [4, 4, 1]}
    sa, ex = "self_attention.", "mlp.experts.linear_fc"
    assert shapes("megatron", "deepseek_v3_bf16", "decoder.layers.1.", ep=2,
                  vocab_multiple=8) == {  # EP rank 0: experts 0, 1
        "input_layernorm" + W: [32], sa + "linear_q_down_proj" + W: [16, 32],
        sa + "linear_q_up_proj.layer_norm_weight": [16],
        sa + "linear_q_up_proj" + W: [24, 16],
        sa + "linear_kv_down_proj" + W: [20, 32],
        sa + "linear_kv_up_proj.layer_norm_weight": [16],
        sa + "linear_kv_up_proj" + W: [32, 16],
        sa + "linear_proj" + W: [32, 16], "pre_mlp_layernorm" + W: [32],
        "mlp.router" + W: [4, 32], "mlp.router.expert_bias": [4],
        ex + "1.weight0": [32, 32], ex + "1.weight1": [32, 32],
        ex + "2.weight0": [32, 16], ex + "2.weight1": [32, 16],
        "mlp.shared_experts.linear_fc1" + W: [16, 32],
        "mlp.shared_experts.linear_fc2" + W: [32, 8]}
    # vLLM, K=2 < tp=4, d=8: rank r holds q head r, kv head r // 2
    a, got = run("vllm", "llama", tp=4)
    x, L0 = "model.layers.0.self_attn.", "model.layers.0.self_attn.qkv_proj"
    for r in range(4):
        want = _cat(a(x + "q_proj.weight")[8 * r:8 * r + 8],
                    a(x + "k_proj.weight")[8 * (r // 2):8 * (r // 2) + 8],
                    a(x + "v_proj.weight")[8 * (r // 2):8 * (r // 2) + 8])
        assert np.array_equal(got["p-d0-p0-e0-t%d" % r][L0 + ".weight"][1],
                              want)
    # gate_up_proj / linear_fc1 = [gate chunk t; up chunk t] (I 48), not a
    # chunk of [gate; up]: [vllm] MergedColumnParallelLinear, [mcore §5]
    y = "model.layers.0.mlp."
    want = _cat(a(y + "gate_proj.weight")[12:24],
                a(y + "up_proj.weight")[12:24])
    assert np.array_equal(got["p-d0-p0-e0-t1"][y + "gate_up_proj.weight"][1],
                          want)
    # Megatron, g=2, tp=2: rank 1 = group 1 = [q heads 2, 3; k 1; v 1]
    a, got = run("megatron", "llama", tp=2, vocab_multiple=1)
    want = _cat(a(x + "q_proj.weight")[16:32], a(x + "k_proj.weight")[8:16],
                a(x + "v_proj.weight")[8:16])
    assert np.array_equal(got["p-d0-p0-e0-t1"][
        "decoder.layers.0.self_attention.linear_qkv.weight"][1], want)
    want = _cat(a(y + "gate_proj.weight")[24:], a(y + "up_proj.weight")[24:])
    assert np.array_equal(got["p-d0-p0-e0-t1"][
        "decoder.layers.0.mlp.linear_fc1.weight"][1], want)
    # vLLM linear EP, 4 experts over 3 ranks: [0, 1], [2], [3]
    a, got = run("vllm", "qwen3_moe", dp=3, ep=3)
    x = "model.layers.1.mlp.experts.%d."
    for e, ids in enumerate([[0, 1], [2], [3]]):
        w13 = got["p-d%d-p0-e%d-t0" % (e, e)][
            "model.layers.1.mlp.experts.routed_experts.w13_weight"][1]
        assert np.array_equal(w13, np.stack(
            [_cat(a(x % g + "gate_proj.weight"), a(x % g + "up_proj.weight"))
             for g in ids]))
    # Megatron, E=4: EP rank e holds experts [e*E/ep, (e+1)*E/ep) whole;
    # ep 4, tp 2, dp 2: d1 t0 is EP rank 2; ep 2, tp 2: t1 is EP rank 1
    x = "model.layers.0.block_sparse_moe.experts.%d."
    for grid, pid, ids in ((dict(dp=2, ep=4), "p-d1-p0-e2-t0", [2]),
                           (dict(ep=2), "p-d0-p0-e1-t1", [2, 3])):
        a, got = run("megatron", "mixtral", tp=2, vocab_multiple=8, **grid)
        for k, g in enumerate(ids):
            y = "decoder.layers.0.mlp.experts.linear_fc%d.weight" + str(k)
            assert np.array_equal(got[pid][y % 1][1], _cat(
                a(x % g + "w1.weight"), a(x % g + "w3.weight")))
            assert np.array_equal(got[pid][y % 2][1], a(x % g + "w2.weight"))
    # Megatron default m=128: V=64 padded to 128 zero rows
    emb = run("megatron", "llama")[1]["p-d0-p0-e0-t0"][
        "embedding.word_embeddings.weight"][1]
    assert emb.shape[0] == 128 and not emb[64:].any() and emb[:64].all()


def main():
    configs = dict(hfc.CONFIGS, deepseek_v3_bf16=DEEPSEEK_V3_BF16,
                   llama_v40=dict(hfc.CONFIGS["llama"], vocab_size=40),
                   deepseek_v3_moe12=dict(hfc.CONFIGS["deepseek_v3"],
                                          moe_intermediate_size=12,
                                          n_shared_experts=2))
    ckpts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in {c[0] for cs in CASES.values() for c in cs} | {
                r[1] for r in REFUSED}:
            hfc.write_checkpoint(os.path.join(tmp, key), configs[key])
            ckpts[key] = (configs[key],
                          hfc.read_checkpoint(os.path.join(tmp, key)))
    n = 0
    for engine, cases in CASES.items():
        for key, grid in cases:
            _check(ckpts[key][1], ckpts[key][0], engine, **grid)
            n += 1
    for engine, key, grid, why in REFUSED:
        try:
            expected(ckpts[key][1], ckpts[key][0], engine, **grid)
        except ValueError as err:
            assert why in str(err), (engine, key, grid, err)
        else:
            raise AssertionError(("not refused", engine, key, grid))
    _spot_checks(ckpts)
    print("engine_reference: %d layouts checked, %d refusals, spot checks ok"
          % (n, len(REFUSED)))


if __name__ == "__main__":
    main()
