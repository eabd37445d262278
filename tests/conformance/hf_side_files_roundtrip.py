#!/usr/bin/env python3
"""A checkpoint written by transformers' save_pretrained (a tiny Llama with
a tokenizer and a chat template) goes through `reshard hf import` and
`reshard hf export`, and through `reshard hf reshard`; each output is a
loadable Hugging Face directory with no file copied by hand:
AutoModelForCausalLM.from_pretrained gives every parameter equal to the
original's, AutoTokenizer.from_pretrained encodes and renders the chat
template as the original does, and every side file is byte for byte the
source's.

Needs transformers and tokenizers importable by the Python running it (the
venv of `make conformance`); exits 77 (skipped) otherwise.

Usage: hf_side_files_roundtrip.py RESHARD_BINARY [WORK_DIR]
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
except ImportError as e:  # pragma: no cover - depends on the environment
    print("skipped: %s" % e)
    sys.exit(77)

RESHARD = sys.argv[1]
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
                 "</s>{% endfor %}")
SIDE = ("chat_template.jinja", "config.json", "generation_config.json",
        "tokenizer.json", "tokenizer_config.json")


def run(*args):
    r = subprocess.run([RESHARD, *map(str, args)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit("reshard %s failed (%d): %s" % (args[1], r.returncode,
                                                 r.stderr.strip()))
    return r


def save_tiny_llama(directory):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.temperature = 0.7
    model.generation_config.do_sample = True
    model.save_pretrained(directory)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["the quick brown fox jumps over the lazy dog"] * 20,
        trainers.BpeTrainer(vocab_size=128,
                            special_tokens=["<unk>", "<s>", "</s>"]))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
        eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return model


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_loads(original, source, out, what):
    names = sorted(n for n in os.listdir(source) if n in SIDE or
                   n.endswith((".json", ".jinja")) and
                   not n.endswith(".index.json"))
    for n in names:
        if read(os.path.join(source, n)) != read(os.path.join(out, n)):
            sys.exit("%s: %s differs from the source's" % (what, n))
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    want = original.state_dict()
    got = model.state_dict()
    if sorted(got) != sorted(want):
        sys.exit("%s: parameters %s != %s" % (what, sorted(got), sorted(want)))
    for name, t in want.items():
        if t.dtype != got[name].dtype or not torch.equal(t, got[name]):
            sys.exit("%s: %s differs" % (what, name))
    a = transformers.AutoTokenizer.from_pretrained(source)
    b = transformers.AutoTokenizer.from_pretrained(out)
    text = "the lazy fox"
    chat = [{"role": "user", "content": text}]
    if (a(text)["input_ids"] != b(text)["input_ids"] or
            a.apply_chat_template(chat, tokenize=False) !=
            b.apply_chat_template(chat, tokenize=False)):
        sys.exit("%s: the tokenizer differs" % what)
    print("%s: from_pretrained equal (%d parameters, side files %s)"
          % (what, len(want), ", ".join(names)))


def main():
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(
        prefix="reshard-side-files-")
    src = os.path.join(work, "llama")
    original = save_tiny_llama(src)
    missing = [n for n in SIDE if not os.path.exists(os.path.join(src, n))]
    if missing:
        sys.exit("save_pretrained wrote no %s" % missing)
    uri = "fs://" + os.path.join(work, "store")
    imp = json.loads(run("hf", "import", src, uri, "--json").stdout)
    run("store", "verify", uri, imp["manifest_key"])
    out = os.path.join(work, "exported")
    exp = json.loads(run("hf", "export", uri, imp["manifest_key"], out,
                         "--json").stdout)
    if exp["side_files"] != imp["side_files"] or exp["side_files"] < 5:
        sys.exit("side files: imported %d, exported %d"
                 % (imp["side_files"], exp["side_files"]))
    check_loads(original, src, out, "hf import + hf export")
    placement = os.path.join(work, "tp1.json")
    run("hf", "layout", os.path.join(src, "config.json"), "--tp", 1,
        "--checkpoint", src, "-o", placement)
    resharded = os.path.join(work, "resharded")
    run("hf", "reshard", src, placement, resharded)
    check_loads(original, src, resharded, "hf reshard")


if __name__ == "__main__":
    main()
