import torch, reshard
load = lambda name: reshard.Placement.from_json(open(f"tests/data/scenarios/{name}.json").read())
src, dst = load("cross_dim_ep2_to_tp2_source"), load("cross_dim_ep2_to_tp2_target")  # EP2 rows -> TP2 columns
full = {t.tensor_id: torch.randn(t.global_shape).to(torch.bfloat16) for t in src.tensors}
box = lambda f: full[f.tensor_id][tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))]
source = {p.participant_id: {f.tensor_id: box(f).contiguous() for f in p.fragments} for p in src.parts}
target = {p.participant_id: {f.tensor_id: torch.empty(f.local_shape, dtype=torch.bfloat16) for f in p.fragments} for p in dst.parts}
report = reshard.reshard(src, source, dst, target)
assert all(torch.equal(target[p.participant_id][f.tensor_id], box(f)) for p in dst.parts for f in p.fragments)
print(f"moved {report.bytes} bytes in {report.regions} regions; every byte checked")
