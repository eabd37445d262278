"""Tiny Hugging Face checkpoints for the tests, made here (numpy only), and
an independent strict safetensors reader.

Each architecture's tensor names and shapes are written out below from
the model definitions, independently of reshard's own rules, so a test
that lays a generated checkpoint out with `reshard hf layout` checks those
rules against a second statement of them. Tensor bytes are a function of
the tensor name and the byte index, so every byte of every output can be
checked.
"""

import json
import os
import struct
import zlib

import numpy as np

ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
            "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4,
            "F32": 4, "I64": 8, "U64": 8, "F64": 8}
TORCH_TO_ST = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def pattern(name, nbytes):
    """The bytes of tensor `name`: a function of its name and byte index."""
    seed = zlib.crc32(name.encode()) & 0xFFFFFFFF
    i = np.arange(nbytes, dtype=np.uint64)
    v = (i * np.uint64(2654435761) + np.uint64(seed)) >> np.uint64(7)
    return (v & np.uint64(0xFF)).astype(np.uint8).tobytes()


# ---------------------------------------------------------------- configs

CONFIGS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 48, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 48, "tie_word_embeddings": True,
        "torch_dtype": "float16",
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 48, "tie_word_embeddings": False,
        "torch_dtype": "float32",
    },
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "intermediate_size": 48, "moe_intermediate_size": 16,
        "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
        "mlp_only_layers": [0], "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mixtral": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 24, "num_local_experts": 4,
        "num_experts_per_tok": 2, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "deepseek_v3": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3", "hidden_size": 32, "vocab_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "intermediate_size": 32, "moe_intermediate_size": 16,
        "n_routed_experts": 4, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "num_nextn_predict_layers": 1, "topk_method": "noaux_tc",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8",
                                "weight_block_size": [8, 8]},
    },
    # Real releases' quirks: Qwen3-0.6B's tied embeddings with lm_head
    # stored anyway, Kimi-K2's rotary_emb.inv_freq buffers, a vocabulary
    # TP does not divide (151,665 scaled to 97), transformers 5's `dtype`.
    "qwen3_quirks": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 32, "vocab_size": 97, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 48, "tie_word_embeddings": True,
        "dtype": "bfloat16", "_stored_head": True, "_inv_freq": True,
    },
    # Qwen3-30B-A3B-FP8 re-saved by transformers 5: num_local_experts,
    # BF16 block scales on every projection (attention too).
    "qwen3_moe_fp8": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "intermediate_size": 48, "moe_intermediate_size": 16,
        "num_local_experts": 4, "num_experts_per_tok": 2,
        "decoder_sparse_step": 1, "mlp_only_layers": [0],
        "tie_word_embeddings": False, "dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8",
                                "weight_block_size": [8, 8]},
    },
    "mistral": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 48, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    # DeepSeek-V2-Lite: no q_lora_rank (plain q_proj), greedy routing
    # without correction bias, no MTP layers.
    "deepseek_v2": {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2", "hidden_size": 32, "vocab_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "intermediate_size": 32, "moe_intermediate_size": 16,
        "n_routed_experts": 4, "n_shared_experts": 2,
        "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "topk_method": "greedy", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    # GLM-4.5: GQA with q/k/v biases and q/k norms, DeepSeek-style MoE
    # (F32 correction bias), one MTP layer.
    "glm4_moe": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "attention_bias": True, "use_qk_norm": True,
        "partial_rotary_factor": 0.5, "intermediate_size": 48,
        "moe_intermediate_size": 16, "n_routed_experts": 4,
        "n_shared_experts": 1, "first_k_dense_replace": 1,
        "num_nextn_predict_layers": 1, "num_experts_per_tok": 2,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    # gpt-oss: attention sinks, q/k/v/o biases, router bias, MXFP4 experts
    # (U8 blocks [E, 2I, h/32, 16] and scales, BF16 biases).
    "gpt_oss": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "hidden_size": 64, "vocab_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 64, "num_local_experts": 4,
        "experts_per_token": 2, "attention_bias": True,
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn",
                                       "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"]},
    },
    # Qwen3-Next as released: layer_types (linear / full attention), no
    # MTP key in config.json but one mtp.* layer in the files, a dense
    # layer (mlp_only_layers), shared expert with its gate, F32 A_log.
    "qwen3_next": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "intermediate_size": 48, "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16, "num_experts": 4,
        "num_experts_per_tok": 2, "decoder_sparse_step": 1,
        "mlp_only_layers": [0], "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
        "layer_types": ["linear_attention", "full_attention",
                        "linear_attention", "full_attention"],
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "_mtp": 1, "_a_log_dtype": "F32",
    },
    # Qwen3.5 dense (the small releases): text_config under a vision-
    # language architecture, tied embeddings, full_attention_interval,
    # split in_proj_qkv / z / b / a, one MTP layer, the vision tower.
    "qwen3_5": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5", "tie_word_embeddings": True,
        "text_config": {
            "model_type": "qwen3_5_text", "hidden_size": 32,
            "vocab_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "intermediate_size": 48, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
            "full_attention_interval": 2, "mtp_num_hidden_layers": 1,
            "dtype": "bfloat16"},
        "vision_config": {
            "model_type": "qwen3_5", "depth": 2, "hidden_size": 16,
            "intermediate_size": 24, "num_heads": 2, "in_channels": 3,
            "patch_size": 2, "temporal_patch_size": 2,
            "spatial_merge_size": 2, "out_hidden_size": 32,
            "num_position_embeddings": 16},
    },
    # Qwen3.5 MoE (BF16 release form): fused 3-D experts in the decoder
    # layers, per-expert MTP experts, shared expert, the vision tower.
    "qwen3_5_moe": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": 32,
            "vocab_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16, "num_experts": 4,
            "num_experts_per_tok": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
            "layer_types": ["linear_attention", "linear_attention",
                            "linear_attention", "full_attention"],
            "mtp_num_hidden_layers": 1, "dtype": "bfloat16"},
        "vision_config": {
            "depth": 1, "hidden_size": 16, "intermediate_size": 24,
            "num_heads": 2, "in_channels": 3, "patch_size": 2,
            "temporal_patch_size": 2, "spatial_merge_size": 2,
            "out_hidden_size": 32, "num_position_embeddings": 16},
        "_fused_experts": True,
    },
    # A Qwen3.5 MoE FP8 release, text only: per-expert files, BF16 block
    # scales, no model.visual.* tensors although vision_config is there.
    "qwen3_5_moe_fp8": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": 32,
            "vocab_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16, "num_experts": 4,
            "num_experts_per_tok": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
            "full_attention_interval": 2, "mtp_num_hidden_layers": 1,
            "dtype": "bfloat16"},
        "vision_config": {"depth": 1, "hidden_size": 16, "num_heads": 2},
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8",
                                "weight_block_size": [8, 8]},
        "_text_only": True,
    },
}

# gpt-oss dequantized to BF16 (the community BF16 exports): no
# quantization_config, experts as transformers' 3-D parameters (hidden 48:
# no MXFP4 blocks of 32 to fill).
CONFIGS["gpt_oss_bf16"] = dict(
    {k: v for k, v in CONFIGS["gpt_oss"].items()
     if k != "quantization_config"},
    hidden_size=48, intermediate_size=24)
# GLM-4.5-FP8 (compressed-tensors): GLM-4.5's tensors with FP8 linear
# weights and BF16 per-channel weight_scale [out, 1]; the router gate,
# lm_head and one named module left in BF16.
CONFIGS["glm4_moe_fp8"] = dict(CONFIGS["glm4_moe"], quantization_config={
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                    "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float",
                              "strategy": "token", "dynamic": True}}},
    "ignore": ["lm_head", "re:.*mlp\\.gate$", "model.layers.0.mlp.down_proj"]})


# As transformers 5.20's save_pretrained writes them: DeepSeek-V3 and
# GLM-4.5 with num_nextn_predict_layers 1 but no MTP tensors, DeepSeek-V3
# without topk_method but with its F32 e_score_correction_bias; every MoE
# family also in the fused-expert form (save_original_format=False).
CONFIGS["deepseek_v3_hf"] = dict(
    {k: v for k, v in CONFIGS["deepseek_v3"].items()
     if k not in ("topk_method", "quantization_config")},
    _no_mtp=True)
CONFIGS["deepseek_v3_hf_fused"] = dict(CONFIGS["deepseek_v3_hf"],
                                       _fused_experts=True)
CONFIGS["glm4_moe_hf_fused"] = dict(CONFIGS["glm4_moe"], _no_mtp=True,
                                    _fused_experts=True)
CONFIGS["qwen3_moe_fused"] = dict(CONFIGS["qwen3_moe"], _fused_experts=True)
CONFIGS["mixtral_fused"] = dict(CONFIGS["mixtral"], _fused_experts=True)
CONFIGS["deepseek_v2_fused"] = dict(CONFIGS["deepseek_v2"],
                                    _fused_experts=True)
# The text-only Qwen3.5 classes as transformers saves them: a flat config
# (model_type qwen3_5_text / qwen3_5_moe_text), model.*, no vision tower,
# no MTP layers; MoE experts per expert or fused.
CONFIGS["qwen3_5_text"] = dict(
    CONFIGS["qwen3_5"]["text_config"], architectures=["Qwen3_5ForCausalLM"],
    tie_word_embeddings=True)
del CONFIGS["qwen3_5_text"]["mtp_num_hidden_layers"]
CONFIGS["qwen3_5_moe_text"] = dict(
    CONFIGS["qwen3_5_moe"]["text_config"],
    architectures=["Qwen3_5MoeForCausalLM"], tie_word_embeddings=False)
del CONFIGS["qwen3_5_moe_text"]["mtp_num_hidden_layers"]
CONFIGS["qwen3_5_moe_text_fused"] = dict(CONFIGS["qwen3_5_moe_text"],
                                         _fused_experts=True)


BUFFER_SUFFIX = "rotary_emb.inv_freq"


def ignored(cfg, weight):
    """Whether compressed-tensors' ignore list leaves `weight` unquantized
    (entries name modules, or are "re:" regular expressions)."""
    import re
    module = weight[:-len(".weight")]
    for e in cfg["quantization_config"].get("ignore", []):
        if e.startswith("re:") and re.fullmatch(e[3:], module):
            return True
        if e == module:
            return True
    return False


def hybrid_tensors(cfg, add, linear):
    """Qwen3-Next and Qwen3.5 checkpoints, from the model definitions:
    gated DeltaNet layers, gated attention, shared expert, mtp.*, and
    Qwen3.5's language_model prefix and vision tower."""
    arch = cfg["architectures"][0]
    qwen35 = arch.startswith("Qwen3_5")
    # The text-only classes (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM):
    # model.* and no vision tower, config flat or with text_config.
    text_only = arch.endswith("ForCausalLM")
    t = cfg.get("text_config", cfg)
    pre = "model." if text_only else "model.language_model."
    h, V, L = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    H, K, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    kd = nk * t["linear_key_head_dim"]
    vd = nv * t["linear_value_head_dim"]
    E = t.get("num_experts", 0)
    if "layer_types" in t:
        linear_layer = [x == "linear_attention" for x in t["layer_types"]]
    else:
        n = t.get("full_attention_interval", 4)
        linear_layer = [(l + 1) % n != 0 for l in range(L)]

    def mlp(p, i):
        linear(p + "gate_proj.weight", [i, h])
        linear(p + "up_proj.weight", [i, h])
        linear(p + "down_proj.weight", [h, i])

    def layer(p, l, mtp):
        add(p + "input_layernorm.weight", [h])
        add(p + "post_attention_layernorm.weight", [h])
        if not mtp and linear_layer[l]:
            a = p + "linear_attn."
            if qwen35:
                linear(a + "in_proj_qkv.weight", [2 * kd + vd, h])
                linear(a + "in_proj_z.weight", [vd, h])
                add(a + "in_proj_b.weight", [nv, h])
                add(a + "in_proj_a.weight", [nv, h])
            else:
                linear(a + "in_proj_qkvz.weight", [2 * kd + 2 * vd, h])
                add(a + "in_proj_ba.weight", [2 * nv, h])
            add(a + "conv1d.weight", [2 * kd + vd, 1,
                                      t["linear_conv_kernel_dim"]])
            add(a + "dt_bias", [nv])
            add(a + "A_log", [nv], cfg.get("_a_log_dtype", out_dtype(cfg)))
            add(a + "norm.weight", [t["linear_value_head_dim"]])
            linear(a + "out_proj.weight", [h, vd])
        else:
            a = p + "self_attn."
            linear(a + "q_proj.weight", [2 * H * d, h])  # queries + gate
            linear(a + "k_proj.weight", [K * d, h])
            linear(a + "v_proj.weight", [K * d, h])
            linear(a + "o_proj.weight", [h, H * d])
            add(a + "q_norm.weight", [d])
            add(a + "k_norm.weight", [d])
        sparse = E > 0 and (mtp or l not in t.get("mlp_only_layers", []))
        if not sparse:
            mlp(p + "mlp.", t["intermediate_size"])
            return
        I = t["moe_intermediate_size"]
        add(p + "mlp.gate.weight", [E, h])
        if cfg.get("_fused_experts") and not mtp:
            add(p + "mlp.experts.gate_up_proj", [E, 2 * I, h])
            add(p + "mlp.experts.down_proj", [E, h, I])
        else:
            for e in range(E):
                mlp(p + "mlp.experts.%d." % e, I)
        mlp(p + "mlp.shared_expert.", t["shared_expert_intermediate_size"])
        add(p + "mlp.shared_expert_gate.weight", [1, h])

    if qwen35 and not text_only and not cfg.get("_text_only"):
        v = cfg["vision_config"]
        D, Iv, M = v["hidden_size"], v["intermediate_size"], (
            v["hidden_size"] * v["spatial_merge_size"] ** 2)
        x = "model.visual."
        add(x + "patch_embed.proj.weight",
            [D, v["in_channels"], v["temporal_patch_size"], v["patch_size"],
             v["patch_size"]])
        add(x + "patch_embed.proj.bias", [D])
        add(x + "pos_embed.weight", [v["num_position_embeddings"], D])
        for b in range(v["depth"]):
            q = x + "blocks.%d." % b
            for n in ("norm1", "norm2"):
                add(q + n + ".weight", [D])
                add(q + n + ".bias", [D])
            add(q + "attn.qkv.weight", [3 * D, D])
            add(q + "attn.qkv.bias", [3 * D])
            add(q + "attn.proj.weight", [D, D])
            add(q + "attn.proj.bias", [D])
            add(q + "mlp.linear_fc1.weight", [Iv, D])
            add(q + "mlp.linear_fc1.bias", [Iv])
            add(q + "mlp.linear_fc2.weight", [D, Iv])
            add(q + "mlp.linear_fc2.bias", [D])
        add(x + "merger.norm.weight", [D])
        add(x + "merger.norm.bias", [D])
        add(x + "merger.linear_fc1.weight", [M, M])
        add(x + "merger.linear_fc1.bias", [M])
        add(x + "merger.linear_fc2.weight", [v["out_hidden_size"], M])
        add(x + "merger.linear_fc2.bias", [v["out_hidden_size"]])
    add(pre + "embed_tokens.weight", [V, h])
    for l in range(L):
        layer(pre + "layers.%d." % l, l, False)
    mtp = t.get("mtp_num_hidden_layers", cfg.get("_mtp", 0))
    if mtp:
        add("mtp.fc.weight", [h, 2 * h])
        add("mtp.pre_fc_norm_embedding.weight", [h])
        add("mtp.pre_fc_norm_hidden.weight", [h])
        for k in range(mtp):
            layer("mtp.layers.%d." % k, L + k, True)
        add("mtp.norm.weight", [h])
    add(pre + "norm.weight", [h])
    if not cfg.get("tie_word_embeddings", False):
        add("lm_head.weight", [V, h])


def out_dtype(cfg):
    t = cfg.get("text_config", cfg)
    return TORCH_TO_ST[t.get("torch_dtype") or t["dtype"]]


def model_tensors(cfg):
    """[(name, st_dtype, shape)] of a checkpoint of `cfg`."""
    arch = cfg["architectures"][0]
    t = cfg.get("text_config", cfg)
    h, V, L = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    H = t["num_attention_heads"]
    K = t.get("num_key_value_heads", H)
    d = t.get("head_dim") or h // H
    I = t.get("intermediate_size", 0)
    dt = out_dtype(cfg)
    quant = cfg.get("quantization_config", {}).get("quant_method")
    fp8 = quant == "fp8"
    # Qwen's FP8 releases store block scales in BF16, DeepSeek's in F32.
    scale_dt = "BF16" if arch.startswith("Qwen") else "F32"
    block = cfg["quantization_config"]["weight_block_size"] if fp8 else None
    out = []

    def add(name, shape, dtype=dt):
        out.append((name, dtype, list(shape)))

    def linear(name, shape):  # FP8 weights carry a block scale
        if fp8:
            add(name, shape, "F8_E4M3")
            add(name[:-len("weight")] + "weight_scale_inv",
                [-(-shape[0] // block[0]), -(-shape[1] // block[1])],
                scale_dt)
        elif quant == "compressed-tensors" and not ignored(cfg, name):
            add(name, shape, "F8_E4M3")
            add(name + "_scale", [shape[0], 1], "BF16")
        else:
            add(name, shape)

    if arch.startswith("Qwen3Next") or arch.startswith("Qwen3_5"):
        hybrid_tensors(cfg, add, linear)
        return out

    def mlp(p, i):
        linear(p + "gate_proj.weight", [i, h])
        linear(p + "up_proj.weight", [i, h])
        linear(p + "down_proj.weight", [h, i])

    def experts(x, E, i, names=("gate_proj", "up_proj", "down_proj")):
        """Routed experts under `x`: per expert, or transformers 5's fused
        form (save_original_format=False): gate_up_proj [E, 2I, h] (gate
        rows then up rows), down_proj [E, h, I]."""
        if cfg.get("_fused_experts"):
            add(x + "gate_up_proj", [E, 2 * i, h])
            add(x + "down_proj", [E, h, i])
            return
        for e in range(E):
            y = x + "%d." % e
            linear(y + names[0] + ".weight", [i, h])
            linear(y + names[1] + ".weight", [i, h])
            linear(y + names[2] + ".weight", [h, i])

    def layer(l):
        p = "model.layers.%d." % l
        add(p + "input_layernorm.weight", [h])
        add(p + "post_attention_layernorm.weight", [h])
        a = p + "self_attn."
        if cfg.get("_inv_freq"):
            add(a + BUFFER_SUFFIX, [d // 2], "F32")
        if arch.startswith("Deepseek"):
            r, kvr = cfg["q_lora_rank"], cfg["kv_lora_rank"]
            nope, rope, v = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                             cfg["v_head_dim"])
            if r is None:
                linear(a + "q_proj.weight", [H * (nope + rope), h])
            else:
                linear(a + "q_a_proj.weight", [r, h])
                add(a + "q_a_layernorm.weight", [r])
                linear(a + "q_b_proj.weight", [H * (nope + rope), r])
            linear(a + "kv_a_proj_with_mqa.weight", [kvr + rope, h])
            add(a + "kv_a_layernorm.weight", [kvr])
            linear(a + "kv_b_proj.weight", [H * (nope + v), kvr])
            linear(a + "o_proj.weight", [h, H * v])
        else:
            linear(a + "q_proj.weight", [H * d, h])
            linear(a + "k_proj.weight", [K * d, h])
            linear(a + "v_proj.weight", [K * d, h])
            linear(a + "o_proj.weight", [h, H * d])
            if arch == "Qwen2ForCausalLM" or cfg.get("attention_bias"):
                add(a + "q_proj.bias", [H * d])
                add(a + "k_proj.bias", [K * d])
                add(a + "v_proj.bias", [K * d])
            if arch == "GptOssForCausalLM":
                add(a + "o_proj.bias", [h])
                add(a + "sinks", [H])
            if (arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
                    or cfg.get("use_qk_norm")):
                add(a + "q_norm.weight", [d])
                add(a + "k_norm.weight", [d])
        if arch == "MixtralForCausalLM":
            # Fused, transformers 5 renames block_sparse_moe to mlp.
            E = cfg["num_local_experts"]
            m = p + ("mlp." if cfg.get("_fused_experts")
                     else "block_sparse_moe.")
            add(m + "gate.weight", [E, h])
            experts(m + "experts.", E, I, ("w1", "w3", "w2"))
        elif arch == "GptOssForCausalLM":
            E, x = cfg["num_local_experts"], p + "mlp.experts."
            add(p + "mlp.router.weight", [E, h])
            add(p + "mlp.router.bias", [E])
            if quant == "mxfp4":
                add(x + "gate_up_proj_blocks", [E, 2 * I, h // 32, 16], "U8")
                add(x + "gate_up_proj_scales", [E, 2 * I, h // 32], "U8")
                add(x + "down_proj_blocks", [E, h, I // 32, 16], "U8")
                add(x + "down_proj_scales", [E, h, I // 32], "U8")
            else:  # the BF16 exports: transformers' [E, in, out] params
                add(x + "gate_up_proj", [E, h, 2 * I])
                add(x + "down_proj", [E, I, h])
            add(x + "gate_up_proj_bias", [E, 2 * I])
            add(x + "down_proj_bias", [E, h])
        elif arch == "Qwen3MoeForCausalLM" and l not in cfg["mlp_only_layers"]:
            E = cfg.get("num_experts") or cfg["num_local_experts"]
            add(p + "mlp.gate.weight", [E, h])
            experts(p + "mlp.experts.", E, cfg["moe_intermediate_size"])
        elif ("n_routed_experts" in cfg
              and l >= cfg["first_k_dense_replace"]):
            E, mi = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
            add(p + "mlp.gate.weight", [E, h])
            if arch != "DeepseekV2ForCausalLM":
                add(p + "mlp.gate.e_score_correction_bias", [E], "F32")
            experts(p + "mlp.experts.", E, mi)
            mlp(p + "mlp.shared_experts.", cfg["n_shared_experts"] * mi)
        else:
            mlp(p + "mlp.", I)

    add("model.embed_tokens.weight", [V, h])
    for l in range(L):
        layer(l)
    # transformers' DeepseekV3/Glm4Moe ForCausalLM save no MTP layers
    # whatever config.json counts (_no_mtp).
    nextn = 0 if cfg.get("_no_mtp") else cfg.get("num_nextn_predict_layers", 0)
    for k in range(nextn):
        l = L + k
        layer(l)
        p = "model.layers.%d." % l
        add(p + "embed_tokens.weight", [V, h])
        add(p + "enorm.weight", [h])
        add(p + "hnorm.weight", [h])
        add(p + "eh_proj.weight", [h, 2 * h])
        add(p + "shared_head.norm.weight", [h])
        add(p + "shared_head.head.weight", [V, h])
    add("model.norm.weight", [h])
    if not cfg.get("tie_word_embeddings", False) or cfg.get("_stored_head"):
        add("lm_head.weight", [V, h])
    return out


# ------------------------------------------------------------ the format

def encode_file(tensors, metadata=None):
    """The bytes of one safetensors file of [(name, dtype, shape, data)]:
    larger items first (then by name), header padded to 8 bytes, with
    `metadata` (default {"format": "pt"})."""
    order = sorted(tensors, key=lambda t: (-ITEMSIZE[t[1]], t[0]))
    header, at = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, dtype, shape, data in order:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return (struct.pack("<Q", len(text)) + text
            + b"".join(t[3] for t in order))


def write_checkpoint(directory, cfg, files=3, tensors=None, fill=None):
    """Writes config.json, `files` shards and the index; returns
    {name: (dtype, shape, bytes)}. `fill(name, dtype, shape, nbytes)`
    gives each tensor's bytes (any bytes-like); default `pattern`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    spec = tensors if tensors is not None else model_tensors(cfg)
    data = {}
    for name, dtype, shape in spec:
        n = ITEMSIZE[dtype] * int(np.prod(shape, dtype=np.int64))
        data[name] = (dtype, shape, fill(name, dtype, shape, n) if fill
                      else pattern(name, n))
    names = list(data)
    per = -(-len(names) // files)
    weight_map = {}
    for k in range(files):
        chunk = names[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, files)
        with open(os.path.join(directory, fname), "wb") as f:
            f.write(encode_file([(n, *data[n]) for n in chunk]))
        weight_map.update({n: fname for n in chunk})
    total = sum(len(v[2]) for v in data.values())
    with open(os.path.join(directory, "model.safetensors.index.json"),
              "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": weight_map}, f, indent=2)
    return data


def read_file(path):
    """{name: (dtype, shape, bytes)} of one file, checked like the
    reference reader: header length in range, JSON object, known dtypes,
    sizes matching shapes, offsets tiling the data exactly."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) >= 8, path
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), path
    header = json.loads(raw[8:8 + n].decode())
    base = 8 + n
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in info.values())
            continue
        b, e = info["data_offsets"]
        size = ITEMSIZE[info["dtype"]] * int(np.prod(info["shape"],
                                                     dtype=np.int64))
        assert e - b == size, (path, name)
        assert (base + b) % ITEMSIZE[info["dtype"]] == 0, (path, name)
        spans.append((b, e))
        out[name] = (info["dtype"], info["shape"], raw[base + b:base + e])
    at = 0
    for b, e in sorted(spans):
        assert b == at, (path, "hole or overlap at", b)
        at = e
    assert at == len(raw) - base, (path, "trailing bytes")
    return out


def read_checkpoint(directory):
    """{name: (dtype, shape, bytes)} of a sharded checkpoint, through its
    index (which must name exactly the files' tensors)."""
    with open(os.path.join(directory, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for fname in sorted(set(index["weight_map"].values())):
        for name, t in read_file(os.path.join(directory, fname)).items():
            assert index["weight_map"][name] == fname, name
            assert name not in out, name
            out[name] = t
    assert set(out) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(len(t[2])
                                                  for t in out.values())
    return out
