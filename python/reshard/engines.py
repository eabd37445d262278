"""Engine layouts: reshard straight into the parameters Megatron-Core
trainers and vLLM/SGLang engines hold (fused, interleaved, padded).

    import reshard, reshard.engines
    trainer = reshard.engines.layout("config.json", engine="megatron",
                                     tp=2, pp=2)
    rollout = reshard.engines.layout("config.json", engine="vllm", tp=4)
    mine = rollout.bind("p-d0-p0-e0-t1", model.named_parameters())
    # `mine` is {placement fragment id: view into a parameter}: pass it to
    # reshard.reshard, LiveSession, WeightStore.upload/load or hf.load
    # with rollout.placement.

Each layout is a placement of the model's canonical (Hugging Face)
tensors plus, for every participant, its parameters: name, shape, dtype,
and the pieces that fill them (a placement fragment at a byte offset, or
padding that is never sent and is zero after a load, or a fill: padding
holding one element repeated, such as vLLM's KV-cache scales at -1.0). See
docs/engines.md.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, \
    Tuple, Union

from reshard import _reshard
from reshard._files import read_text
from reshard._tensors import _bit_container, canonical_dtype, host_view


class Piece(NamedTuple):
    offset: int         # byte offset inside the parameter
    nbytes: int
    fragment: Optional[str]  # placement fragment id; None for padding
    # Padding only: one element's bytes, repeated over the piece (a
    # constant the engine holds); None: zeros.
    fill: Optional[bytes] = None


class Parameter(NamedTuple):
    name: str
    shape: Tuple[int, ...]
    dtype: str          # placement dtype ("bfloat16")
    pieces: Tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        n = _ITEMSIZE[self.dtype]
        for d in self.shape:
            n *= d
        return n


_ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2,
             "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
             "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
             "float8_e4m3fn": 1, "float8_e5m2": 1}


def _error(message: str) -> Exception:
    return _reshard.InvalidArgumentError(message)


class EngineLayout:
    """One engine preset's layout of a model on one grid."""

    def __init__(self, placement: _reshard.WeightPlacementManifest,
                 maps: str) -> None:
        data = json.loads(maps)
        self.placement = placement
        self._maps = maps
        self.engine: str = data["engine"]
        self._params: Dict[str, Dict[str, Parameter]] = {}
        for p in data["participants"]:
            self._params[p["participant_id"]] = {
                q["name"]: Parameter(
                    q["name"], tuple(q["shape"]), q["dtype"],
                    tuple(Piece(x["offset"], x["nbytes"], x["fragment"],
                                bytes.fromhex(x["fill"]) if "fill" in x
                                else None)
                          for x in q["pieces"]))
                for q in p["parameters"]}

    @property
    def participants(self) -> List[str]:
        """Participant ids (``p-d<dp>-p<pp>-e<ep>-t<tp>``), sorted."""
        return sorted(self._params)

    def _of(self, participant: str) -> Dict[str, Parameter]:
        try:
            return self._params[participant]
        except KeyError:
            raise _error(f"the {self.engine} layout has no participant "
                         f"'{participant}'") from None

    def parameters(self, participant: str) -> Dict[str, Tuple[tuple, str]]:
        """{parameter name: (shape, dtype)} in engine order."""
        return {n: (q.shape, q.dtype) for n, q in self._of(participant).items()}

    def parameter_maps(self, participant: str) -> Dict[str, Parameter]:
        """{parameter name: Parameter} with its pieces."""
        return dict(self._of(participant))

    def empty(self, participant: str, device: Any = "cpu") -> Dict[str, Any]:
        """Torch tensors of the participant's parameters, zero but for fill
        pieces, which hold their element (what a freshly loaded engine
        holds in its padding: zeros, and e.g. vLLM's KV-cache scales -1.0).

        FP8 parameters (float8_e4m3fn, float8_e5m2) are uint8 tensors of
        the same shape, holding the bit patterns, when this torch has no
        such dtype (before torch 2.1, e.g. Debian's 1.13); ``bind`` takes
        them as they are."""
        import torch
        out = {}
        for n, q in self._of(participant).items():
            name = canonical_dtype(q.dtype) or q.dtype
            dtype = getattr(torch, name, None)
            if not isinstance(dtype, torch.dtype):
                if not _bit_container("uint8", name):
                    raise _error(
                        f"parameter '{n}' of participant '{participant}' "
                        f"({self.engine} layout) has dtype {q.dtype}, which "
                        f"torch {torch.__version__} lacks")
                dtype = torch.uint8  # the bit patterns
            out[n] = torch.zeros(q.shape, dtype=dtype, device=device)
            _write_fills(out[n], q)
        return out

    def _tensors(self, participant: str, named: Union[Mapping, Iterable],
                 strict: bool) -> Dict[str, Any]:
        params = self._of(participant)
        given = dict(named.items() if isinstance(named, Mapping) else named)
        if strict:
            extra = sorted(set(given) - set(params))
            if extra:
                raise _error(f"participant '{participant}' of the "
                             f"{self.engine} layout has no parameter "
                             f"'{extra[0]}' (pass strict=False to ignore "
                             "parameters outside the layout)")
        missing = [n for n in params if n not in given]
        if missing:
            raise _error(f"parameter '{missing[0]}' of participant "
                         f"'{participant}' ({self.engine} layout) was not "
                         "given")
        return given

    def bind(self, participant: str, named_parameters: Union[Mapping,
                                                             Iterable],
             *, strict: bool = True) -> Dict[str, Any]:
        """{placement fragment id: view} of the participant's parameters.

        `named_parameters` is {name: tensor} or an iterable of (name,
        tensor) such as ``module.named_parameters()``; each must be
        contiguous with the map's shape and dtype (torch tensors, numpy
        arrays; an FP8 parameter may also be a uint8 or int8 tensor of its
        shape holding the bit patterns, as ``empty`` gives them on a torch
        without float8 dtypes). The views alias the parameters: resharding
        into them writes the parameters in place. With ``strict`` (the
        default) a parameter the layout lacks is an error.
        """
        given = self._tensors(participant, named_parameters, strict)
        out: Dict[str, Any] = {}
        for name, q in self._of(participant).items():
            tensor = given[name]
            what = (f"parameter '{name}' of participant '{participant}' "
                    f"({self.engine} layout)")
            _check(tensor, q, what)
            flat = _flat(tensor)
            size = _ITEMSIZE[q.dtype]
            for piece in q.pieces:
                if piece.fragment is None:
                    continue
                begin = piece.offset // size
                out[piece.fragment] = flat[begin:begin + piece.nbytes // size]
        return out

    def zero_padding(self, participant: str,
                     named_parameters: Union[Mapping, Iterable]) -> None:
        """Writes the padding of the participant's parameters: zeros, and
        each fill piece's element (what the engine holds there)."""
        given = self._tensors(participant, named_parameters, False)
        for name, q in self._of(participant).items():
            flat = _flat(given[name])
            size = _ITEMSIZE[q.dtype]
            for piece in q.pieces:
                if piece.fragment is None and piece.fill is None:
                    begin = piece.offset // size
                    flat[begin:begin + piece.nbytes // size] = 0
            _write_fills(given[name], q)

    @property
    def parameter_map_id(self) -> str:
        """``sha256:...`` of every participant's map (engine and release,
        names, shapes, dtypes, pieces), whatever the revision."""
        return _reshard.engine_parameter_map_id(self.placement, self._maps)

    def declare(self, participants: Optional[Iterable[str]] = None) -> str:
        """The declaration (JSON) of the maps of `participants` (default:
        every one): what a holder of these parameters tells the sides that
        write into them (``LiveSession(declare_maps=...)`` does it at
        open; ``reshard engine layout --declare`` writes the same)."""
        ids = [] if participants is None else [str(p) for p in participants]
        return _reshard.engine_declare(self.placement, self._maps, ids)

    def check_declared(self, declaration: str,
                       who: str = "the target") -> None:
        """Raises ``FailedPreconditionError`` unless `declaration` (from
        ``declare``) agrees with this layout's maps of the participants it
        names, naming the first differing parameter."""
        _reshard.engine_check_declared(self.placement, self._maps,
                                       declaration, who)

    def __repr__(self) -> str:
        return (f"reshard.engines.EngineLayout({self.engine!r}, "
                f"{len(self._params)} participants, "
                f"{self.placement.placement_id})")


def _check(tensor: Any, q: Parameter, what: str) -> None:
    shape = tuple(getattr(tensor, "shape", ()))
    if shape != q.shape:
        raise _error(f"{what} has shape {list(shape)}; the layout gives it "
                     f"{list(q.shape)} {q.dtype}")
    view = host_view(tensor, what, False)
    want = canonical_dtype(q.dtype)
    if view.dtype is not None and want is not None and view.dtype != want \
            and not _bit_container(view.dtype, q.dtype):
        raise _error(f"{what} has dtype {view.dtype}; the layout gives it "
                     f"{q.dtype}")
    if view.nbytes != q.nbytes:
        raise _error(f"{what} holds {view.nbytes} bytes; the layout gives "
                     f"it {q.nbytes} ({list(q.shape)} {q.dtype})")


def _write_fills(tensor: Any, q: Parameter) -> None:
    """Writes each fill piece of `q` into `tensor` (contiguous, of q's
    shape and size) byte for byte: its element repeated."""
    fills = [p for p in q.pieces if p.fragment is None and p.fill]
    if not fills:
        return
    if type(tensor).__module__.startswith("torch"):
        import torch
        raw = tensor.detach().reshape(-1).view(torch.uint8)
        for p in fills:
            pattern = torch.tensor(list(p.fill), dtype=torch.uint8,
                                   device=raw.device)
            raw[p.offset:p.offset + p.nbytes] = pattern.repeat(
                p.nbytes // len(p.fill))
        return
    import numpy as np
    raw = np.asarray(tensor).reshape(-1).view(np.uint8)
    for p in fills:
        raw[p.offset:p.offset + p.nbytes] = np.tile(
            np.frombuffer(p.fill, dtype=np.uint8), p.nbytes // len(p.fill))


def _flat(tensor: Any) -> Any:
    """A flat view of a contiguous tensor or array (same memory, same
    dtype)."""
    if type(tensor).__module__.startswith("torch"):
        return tensor.detach().reshape(-1)
    import numpy as np
    return np.asarray(tensor).reshape(-1)


def _config_text(config: Any) -> str:
    if isinstance(config, Mapping):
        return json.dumps(config)
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if text.lstrip().startswith("{"):
            return text
        if os.path.isdir(text):
            text = os.path.join(text, "config.json")
        return read_text(text)
    directory = getattr(config, "directory", None)
    if directory is not None:  # a reshard.hf.Checkpoint
        return read_text(os.path.join(directory, "config.json"))
    raise _error("engines.layout: config must be a config.json path, its "
                 "JSON text, a dict or a reshard.hf.Checkpoint")


def layout(config: Any, engine: str = "vllm", tp: int = 1, pp: int = 1,
           ep: int = 1, dp: int = 1, *, checkpoint: Any = None,
           make_vocab_size_divisible_by: int = 128, resource_id: str = "",
           revision: str = "hf", weight_generation: int = 0,
           quantize: str = "", fp8_block: Optional[tuple] = None,
           dtype: str = "", sequence_parallel_moe: str = "auto"
           ) -> EngineLayout:
    """The layout of engine spec `engine` (NAME, NAME@RELEASE or
    NAME@<RELEASE: "vllm" = "vllm@0.33", "vllm@<0.33", "vllm@<0.10.2",
    "sglang", "megatron" or "hf"; docs/engines.md) for the model `config`
    (a config.json path or
    directory, JSON text, a dict or a reshard.hf.Checkpoint) on a tp x pp x
    dp grid (ep: vLLM 1 or tp*dp; Megatron dividing tp*dp). With
    `checkpoint` (a reshard.hf.Checkpoint, default: `config` when it is
    one), tensor dtypes and shapes come from it. ``quantize="fp8"`` (FP8
    weights with their scales, ``fp8_block=(rows, cols)``) or ``dtype``
    (a float form) ask for another form (docs/conversion.md).
    ``sequence_parallel_moe`` ("auto", "on" or "off"; vllm and sglang):
    vLLM's sequence-parallel MoE, under which the shared experts are whole
    on every rank; "auto" follows vLLM's rule (EP, tp > 1 and dp > 1)."""
    if checkpoint is None and hasattr(config, "_native"):
        checkpoint = config
    native = checkpoint._native if checkpoint is not None else None
    placement, maps = _reshard.engine_layout(
        _config_text(config), engine=engine, tp=tp, pp=pp, ep=ep, dp=dp,
        checkpoint=native,
        make_vocab_size_divisible_by=make_vocab_size_divisible_by,
        resource_id=resource_id, revision=revision,
        weight_generation=weight_generation, quantize=quantize,
        fp8_block=fp8_block, dtype=dtype,
        sequence_parallel_moe=sequence_parallel_moe)
    return EngineLayout(placement, maps)
