"""Tiny seeded models of every architecture the conformance run covers.

Each model is built by transformers from a small config, given seeded random
values in every floating-point tensor (norms and biases included, so that no
two tensors share bytes by accident), and written with `save_pretrained`.
"""

import json
import os

import torch

# Common tiny sizes: 8 query heads (TP up to 8), 2 KV heads (TP 4 and 8
# replicate KV heads), hidden 64, vocabulary 128.
_DENSE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=128,
    max_position_embeddings=128,
)

_HYBRID = dict(
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=128,
    max_position_embeddings=128,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    layer_types=[
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
    ],
)


def _deepseek(v3, mtp):
    kw = dict(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        vocab_size=128,
        max_position_embeddings=128,
    )
    if v3:
        kw.update(q_lora_rank=32, n_group=2, topk_group=1)
        if mtp is not None:
            kw["num_mtp_layers"] = mtp
    else:
        kw.update(q_lora_rank=None, topk_method="greedy", moe_layer_freq=1)
    return kw


# name -> (config class, model class, config kwargs)
SPECS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_DENSE)),
    "llama-v100": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(_DENSE, vocab_size=100),
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(_DENSE)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_DENSE)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(_DENSE)),
    "qwen3-moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            _DENSE,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
    # Wide enough for 64x64 FP8 blocks: at TP 4 each rank holds 32 rows of
    # every expert.
    "qwen3-moe-wide": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            _DENSE,
            hidden_size=128,
            num_key_value_heads=8,
            head_dim=32,
            intermediate_size=256,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
    "mixtral": (
        "MixtralConfig",
        "MixtralForCausalLM",
        dict(_DENSE, num_local_experts=6, num_experts_per_tok=2),
    ),
    "deepseek-v2": (
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        _deepseek(False, None),
    ),
    "deepseek-v3": (
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        _deepseek(True, None),
    ),
    "deepseek-v3-nomtp": (
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        _deepseek(True, 0),
    ),
    "glm4-moe": (
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        dict(
            _DENSE,
            num_hidden_layers=3,
            moe_intermediate_size=32,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            attention_bias=True,
            use_qk_norm=True,
        ),
    ),
    "gpt-oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            _DENSE,
            intermediate_size=32,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
        ),
    ),
    "qwen3-next": (
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        dict(
            _HYBRID,
            intermediate_size=128,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
    "qwen3.5": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        dict(_HYBRID, intermediate_size=128),
    ),
    "qwen3.5-moe": (
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeForCausalLM",
        dict(
            _HYBRID,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ),
    ),
}

MOE = {
    "qwen3-moe",
    "qwen3-moe-wide",
    "mixtral",
    "deepseek-v2",
    "deepseek-v3",
    "deepseek-v3-nomtp",
    "glm4-moe",
    "gpt-oss",
    "qwen3-next",
    "qwen3.5-moe",
}


def build(name, tied=False, seed=0, dtype=torch.bfloat16, keep_fp32=True):
    """The model `name` with seeded random values, or raises. With
    keep_fp32, the tensors the model class keeps in float32 whatever the
    dtype (`_keep_in_fp32_modules_strict`: DeepSeek-V3's and GLM-4.5's
    `e_score_correction_bias`) stay float32, as `from_pretrained` in bf16
    holds them and `save_pretrained` then writes them."""
    import transformers

    cfg_cls, model_cls, kw = SPECS[name]
    cfg = getattr(transformers, cfg_cls)(
        **dict(kw, tie_word_embeddings=tied), dtype="bfloat16"
    )
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = getattr(transformers, model_cls)(cfg)
    model = model.to(dtype)
    if keep_fp32:
        keep = getattr(model, "_keep_in_fp32_modules_strict", None) or []
        for mod_name, mod in model.named_modules():
            for attr, t in list(mod.named_parameters(recurse=False)) + list(
                mod.named_buffers(recurse=False)
            ):
                full = f"{mod_name}.{attr}" if mod_name else attr
                if any(k in full.split(".") for k in keep):
                    t.data = t.data.float()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, t in sorted(model.state_dict(keep_vars=True).items()):
            if t.is_floating_point():
                v = torch.randn(t.shape, generator=gen, dtype=torch.float32)
                t.copy_((v * 0.05).to(t.dtype))
    return model


def save(model, out_dir, original_format=True):
    """save_pretrained into out_dir; returns the config.json dict."""
    model.save_pretrained(
        out_dir, save_original_format=original_format, safe_serialization=True
    )
    with open(os.path.join(out_dir, "config.json")) as f:
        return json.load(f)


def add_mtp(out_dir, seed=1):
    """Adds DeepSeek-V3-style MTP tensors (layer num_hidden_layers: a copy of
    the last decoder layer's tensors with fresh values, plus embed_tokens,
    enorm, hnorm, eh_proj, shared_head.norm and shared_head.head), as the
    releases carry them and transformers' classes do not, in a second file
    with an index. Returns the names added."""
    from safetensors.torch import load_file, save_file

    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    n, h, v = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    main = os.path.join(out_dir, "model.safetensors")
    tensors = load_file(main)
    dtype = tensors["model.embed_tokens.weight"].dtype
    gen = torch.Generator().manual_seed(seed)

    def rand(shape, dt=dtype):
        return (torch.randn(shape, generator=gen) * 0.05).to(dt)

    last, new = f"model.layers.{n - 1}.", f"model.layers.{n}."
    mtp = {}
    for k, t in sorted(tensors.items()):
        if k.startswith(last):
            mtp[new + k[len(last):]] = rand(t.shape, t.dtype)
    mtp[new + "embed_tokens.weight"] = rand([v, h])
    mtp[new + "enorm.weight"] = rand([h])
    mtp[new + "hnorm.weight"] = rand([h])
    mtp[new + "eh_proj.weight"] = rand([h, 2 * h])
    mtp[new + "shared_head.norm.weight"] = rand([h])
    mtp[new + "shared_head.head.weight"] = rand([v, h])
    save_file(mtp, os.path.join(out_dir, "model-mtp.safetensors"),
              metadata={"format": "pt"})
    weight_map = {k: "model.safetensors" for k in tensors}
    weight_map.update({k: "model-mtp.safetensors" for k in mtp})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    return sorted(mtp)
