"""Scalar checks and value-class plumbing shared by the compat modules.

The native constructors of ``reshard._reshard`` validate every contract rule,
but they cannot see Python-level distinctions (``True`` is not an integer, a
list is a sequence, a ``None`` id is absent). These helpers apply those rules
first, with the messages of the contract ("must be an integer", "must fit in
an unsigned 64-bit integer", "must be a non-empty string"), and raise plain
``ValueError``.
"""

from collections.abc import Sequence

MAX_U64 = (1 << 64) - 1
# Canonical axis-kind order: dp < pp < ep < tp.
KIND_ORDER = {"dp": 0, "pp": 1, "ep": 2, "tp": 3}
HEX = frozenset("0123456789abcdef")


def require_int(value, name, minimum=None):
    """Returns `value` if it is an exact int (bool and int subclasses are
    refused) not below `minimum`; raises ValueError naming `name`."""
    if type(value) is not int:
        raise ValueError(f"{name} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return value


def require_u64(value, name, minimum=0):
    """An exact int in [minimum, 2^64-1]."""
    if type(value) is not int:
        raise ValueError(f"{name} must be an integer")
    if value < 0 or value > MAX_U64:
        raise ValueError(f"{name} must fit in an unsigned 64-bit integer")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return value


def require_optional_int(value, name, minimum=0):
    """None, or an exact int not below `minimum`."""
    if value is None:
        return None
    return require_int(value, name, minimum)


def require_str(value, name):
    """A non-empty str (subclasses refused)."""
    if type(value) is not str or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def require_sequence(value, name):
    """A tuple of the items of a non-string sequence."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(
            value, Sequence):
        raise ValueError(f"{name} must be a sequence")
    return tuple(value)


def require_int_tuple(value, name, minimum):
    """A tuple of exact ints, each not below `minimum`."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(
            value, Sequence):
        raise ValueError(f"{name} must contain integers")
    return tuple(require_int(item, name, minimum) for item in value)


def require_items(value, name, cls):
    """A tuple of a sequence whose items are all instances of `cls`."""
    items = require_sequence(value, name)
    for item in items:
        if not isinstance(item, cls):
            raise ValueError(f"{name} must contain {cls.__name__}")
    return items


def require_sha256(value, name):
    """64 lowercase hex characters."""
    require_str(value, name)
    if len(value) != 64 or not set(value) <= HEX:
        raise ValueError(f"{name} must be a lowercase SHA-256 digest")
    return value


def normalize_aliases(value, tensor_id):
    """The sorted alias group of a fragment of `tensor_id` (rule 10):
    unique non-empty strings, empty or at least two members including
    `tensor_id`."""
    aliases = require_sequence(value, "aliases")
    if any(type(a) is not str or not a for a in aliases):
        raise ValueError("aliases must contain non-empty strings")
    if len(set(aliases)) != len(aliases):
        raise ValueError("aliases must not contain duplicates")
    aliases = tuple(sorted(aliases))
    if aliases:
        if len(aliases) < 2:
            raise ValueError(
                "alias group must contain at least two tensor IDs")
        if tensor_id not in aliases:
            raise ValueError("alias group must contain the fragment tensor_id")
    return aliases


def canonical_strides(shape, itemsize):
    """Row-major byte strides of `shape`: the last is `itemsize`."""
    strides = [0] * len(shape)
    running = itemsize
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = running
        running *= shape[d]
    return tuple(strides)


def trusted(cls, native, fields):
    """An instance of the frozen class `cls` with `fields` set as given and
    `native` cached, without running its validation: for values the native
    library has already validated (decoded JSON, planner output)."""
    obj = object.__new__(cls)
    # Frozen dataclasses without slots keep their fields in __dict__.
    obj.__dict__.update(fields)
    obj.__dict__["_native"] = native
    return obj


class NativeBacked:
    """Mixin of the value classes: the validated native object is cached in
    the instance (not a dataclass field, so it takes no part in equality,
    hashing or repr) and rebuilt after unpickling."""

    # Instance attributes that are caches, never pickled.
    _CACHES = ("_native",)

    def to_native(self):
        """The equivalent ``reshard._reshard`` object (validated, cached)."""
        return self.__dict__["_native"]

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in self._CACHES:
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        for key, value in state.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):  # pragma: no cover - every subclass defines it
        raise NotImplementedError
