"""Compatibility layers: reshard behind other projects' public APIs.

* ``reshard.compat.mooncake``: a drop-in for ``mooncake.reshard.weight``
  (placements, runtime bindings, stored manifests, the N-D planner),
  backed by reshard's native core. See docs/python-compat.md.
"""
