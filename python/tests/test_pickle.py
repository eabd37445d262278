"""Placements, bindings and stored manifests pickle as their wire JSON."""
import pickle

import pytest
import torch

import reshard


def test_placement_pickles_with_identical_ids(fixtures):
    for path in sorted(fixtures["placements"].glob("placement_*.json")):
        p = reshard.Placement.from_json(path.read_text())
        q = pickle.loads(pickle.dumps(p))
        assert q == p
        assert (q.placement_id, q.digest, q.topology_id) == \
            (p.placement_id, p.digest, p.topology_id)
        assert q.to_json() == p.to_json()


def test_binding_pickles(data_dir):
    p = reshard.Placement.from_json(
        (data_dir / "scenarios" / "cross_dim_ep2_to_tp2_source.json").read_text())
    part = p.parts[0]
    tensors = {f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
               for f in part.fragments}
    b = reshard.bind_tensors(p, part.participant_id, tensors)
    c = pickle.loads(pickle.dumps(b))
    assert c.to_json() == b.to_json()
    assert [f.address for f in c.fragments] == \
        [f.address for f in b.fragments]


def test_tampered_pickle_is_revalidated(fixtures):
    p = reshard.Placement.from_json(
        (fixtures["placements"] / "placement_100.json").read_text())
    data = pickle.dumps(p).replace(b'"revision":"step-7"', b'"revision":"step-8"')
    with pytest.raises(ValueError, match="placement_id does not match"):
        pickle.loads(data)
