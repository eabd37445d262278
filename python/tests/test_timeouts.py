"""Every timeout refuses NaN, the infinities and negative values at once,
naming the parameter and the value: a deadline compared with NaN is never
reached, an infinite one never expires.

The timeouts are found, not listed: every parameter whose name contains
``timeout`` of every callable of every module of the package (functions,
classes' constructors and methods; the native bindings' signatures from
their docstrings) and every CLI flag containing ``timeout`` (from ``--help``
of every command, cross-checked against the flags in tools/*.cc). Each must
have its refusal below, so a new timeout that is not refused fails here.
"""

import importlib
import inspect
import os
import pathlib
import pkgutil
import re
import subprocess
import time

import reshard
from deadlines import raised_within

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
ROOT = DATA.resolve().parent.parent
SRC = DATA / "scenarios" / "tp_split_4_to_8_source.json"
DST = DATA / "scenarios" / "tp_split_4_to_8_target.json"
CLI = os.environ.get("RESHARD_CLI", "build/reshard")

BAD = (float("nan"), float("inf"), float("-inf"), -1)
QUICK_SECONDS = 5.0


def shown(value):
    return f"{float(value):g}"  # nan, inf, -inf, -1


# (module.qualname of the callable, parameter): the refusal, {} the value.
PYTHON = {
    ("reshard._api.WeightStore.upload", "timeout"):
        "WeightStore.upload: timeout must be between 0 and 604800 seconds, "
        "not {}",
    ("reshard._api.WeightStore.wait", "timeout"):
        "WeightStore.wait: timeout must be a finite number of seconds >= 0, "
        "not {}",
    ("reshard._api.WeightStore.revisions", "timeout"):
        "WeightStore.revisions: timeout must be a finite number of seconds "
        ">= 0, not {}",
    ("reshard._api.LiveSession.__init__", "timeout"):
        "LiveSession: timeout must be > 0 and at most 604800 seconds, not {}",
    ("reshard._api.LiveSession.__init__", "peer_timeout"):
        "LiveSession: peer_timeout must be between 0 and 3600 seconds, not {}",
    ("reshard._api.LiveSession.__init__", "rejoin_timeout"):
        "LiveSession: rejoin_timeout must be between 0 and 604800 seconds, "
        "not {}",
    ("reshard.hf.write", "timeout"):
        "hf.write: timeout must be a finite number of seconds >= 0, not {}",
    ("reshard._frameworks.gather_placement", "timeout"):
        "gather_placement: timeout must be a finite number of seconds > 0, "
        "not {}",
}


def _standing(tmp_path, name, value):
    src = reshard.Placement.from_json(SRC.read_text("utf-8"))
    dst = reshard.Placement.from_json(DST.read_text("utf-8"))
    reshard._reshard.StandingSession(
        str(tmp_path), src, dst, {}, {}, session="t", rank=0, ranks=1,
        **{name: value})


def _share_upload(tmp_path, name, value):
    src = reshard.Placement.from_json(SRC.read_text("utf-8"))
    store = reshard._reshard.WeightStore("fs://" + str(tmp_path))
    store.upload_share_buffers(src, {}, upload_id="u", rank=0, ranks=1,
                               **{name: value})


def _ms_refusal(value):
    if isinstance(value, float):
        return "timeout_ms must be an integer, got float"
    return ("timeout_ms must be between 0 and 604800000 milliseconds, not "
            f"{value}")


# The native bindings take typed arguments: each has a call of its own.
NATIVE = {
    ("reshard._reshard.StandingSession.__init__", "timeout"): (
        _standing,
        "timeout must be > 0 and at most 604800 seconds, not {}".format),
    ("reshard._reshard.StandingSession.__init__", "peer_timeout"): (
        _standing,
        "peer_timeout must be between 0 and 3600 seconds, not {}".format),
    ("reshard._reshard.StandingSession.__init__", "rejoin_timeout"): (
        _standing,
        "rejoin_timeout must be between 0 and 604800 seconds, not {}".format),
    ("reshard._reshard.WeightStore.upload_share_buffers", "timeout_ms"): (
        _share_upload, _ms_refusal),
}

# (command, flag): the arguments of an otherwise runnable command line and
# the flag's range.
CLI_FLAGS = {
    ("selftest", "--timeout"): (
        [str(SRC), str(DST), "--transport", "ucx"], "0.001", "86400"),
    ("engine reshard", "--timeout"): (
        ["src", "dst", "--config", "config.json", "--from", "vllm", "--to",
         "vllm"], "0.1", "86400"),
}


def refusal(call):
    """The exception `call()` raises within QUICK_SECONDS (None if it
    returns); fails if it is still running then."""
    return raised_within(call, QUICK_SECONDS)


def _modules():
    out = [reshard]
    for info in pkgutil.walk_packages(reshard.__path__, "reshard."):
        if info.name != "reshard.__main__":
            out.append(importlib.import_module(info.name))
    return out


_NATIVE_SIGNATURE = re.compile(r"^(?:\d+\. )?[\w.]+\((.*)\)(?: -> .*)?$",
                               re.M)
_NATIVE_PARAMETER = re.compile(r"(?:^|, )\*?(\w+):")


def _parameters(func):
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # a native binding: its docstring
        names = []
        for signature in _NATIVE_SIGNATURE.findall(func.__doc__ or ""):
            names += _NATIVE_PARAMETER.findall(signature)
        return names


def _callables():
    """{module.qualname: (class or None, callable)} of every public
    function, constructor and method of the package's modules."""
    found = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if name.startswith("_"):
                continue
            if inspect.isclass(obj):
                for attr in dir(obj):
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    member = inspect.getattr_static(obj, attr)
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if callable(member):
                        found.setdefault(
                            f"{obj.__module__}.{obj.__qualname__}.{attr}",
                            (obj, member))
            elif callable(obj):
                module_name = getattr(obj, "__module__", None) or \
                    module.__name__
                found.setdefault(
                    f"{module_name}.{getattr(obj, '__qualname__', name)}",
                    (None, obj))
    return found


def _timeout_parameters():
    out = {}
    for key, (cls, func) in _callables().items():
        for name in _parameters(func):
            if "timeout" in name:
                out[(key, name)] = (cls, func)
    return out


def _python_call(cls, func, name, value):
    """`func` with `name`=value and None for every other required
    parameter (on a bare instance for a method): the timeout must be
    refused before anything else is looked at."""
    args, kwargs = [], {name: value}
    parameters = list(inspect.signature(func).parameters.values())
    if cls is not None:
        args.append(object.__new__(cls))
        parameters = parameters[1:]
    for p in parameters:
        if p.name == name or p.default is not inspect.Parameter.empty or \
                p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = None
        else:
            args.append(None)
    return lambda: func(*args, **kwargs)


def test_every_timeout_parameter_refuses_nan_infinities_and_negatives(
        tmp_path):
    found = _timeout_parameters()
    unknown = sorted(set(found) - set(PYTHON) - set(NATIVE))
    assert not unknown, (
        f"timeout parameters without a checked refusal: {unknown}; refuse "
        "NaN, the infinities and negative values and add them here")
    assert sorted(found) == sorted(set(PYTHON) | set(NATIVE))
    for (key, name), (cls, func) in sorted(found.items()):
        for value in BAD:
            if (key, name) in PYTHON:
                want = PYTHON[(key, name)].format(shown(value))
                call = _python_call(cls, func, name, value)
            else:
                make, message = NATIVE[(key, name)]
                want = message(value if name.endswith("_ms")
                               else shown(value))
                if name.endswith("_ms") and not isinstance(value, float):
                    value = int(value)
                call = (lambda m=make, v=value: m(tmp_path, name, v))
            error = refusal(call)
            assert isinstance(error, reshard.InvalidArgumentError), (
                key, name, value, repr(error))
            assert str(error) == want, (key, name, value)
    assert os.listdir(tmp_path) == []  # nothing opened, nothing created


def test_wait_timeout_nan_is_refused(tmp_path):
    """wait(timeout=nan) used to poll forever (no time is >= NaN); inf too.
    Each of NaN, +-inf and -1 is refused at once, in wait and revisions."""
    store = reshard.WeightStore("fs://" + str(tmp_path))
    for value in BAD:
        error = refusal(lambda: store.wait("model", timeout=value))
        assert isinstance(error, reshard.InvalidArgumentError), repr(error)
        assert str(error) == ("WeightStore.wait: timeout must be a finite "
                              f"number of seconds >= 0, not {shown(value)}")
        error = refusal(lambda: store.revisions("model", timeout=value))
        assert str(error) == ("WeightStore.revisions: timeout must be a "
                              "finite number of seconds >= 0, not "
                              f"{shown(value)}")
        error = refusal(lambda: store.wait("model", timeout=0.01,
                                           poll_interval=value))
        assert str(error) == ("WeightStore.wait: poll_interval must be a "
                              "finite number of seconds >= 0, not "
                              f"{shown(value)}")
    # None still waits forever; 0 looks once.
    error = refusal(lambda: store.wait("model", timeout=0))
    assert isinstance(error, reshard.UnavailableError)
    assert str(error) == (f"timed out after 0 s waiting for a revision of "
                          f"'model' newer than 'none' in {store.uri}")


def _help(*command):
    proc = subprocess.run([CLI, *command, "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (command, proc.stderr)
    return proc.stdout


def _cli_timeout_flags(command=()):
    """{(command, flag)} of every flag containing 'timeout', every
    command."""
    text = _help(*command)
    flags = {(" ".join(command), flag) for flag in re.findall(
        r"^\s+(?:-\w,)?(--[\w-]*timeout[\w-]*)", text, re.M)}
    section = text.split("Subcommands:\n", 1)
    if len(section) == 2:
        for line in section[1].splitlines():
            # "  ls, list   ...": a subcommand, then its aliases.
            match = re.match(r"^  ([^\s,]+)", line)
            if match:
                flags |= _cli_timeout_flags(command + (match.group(1),))
    return flags


def test_every_cli_timeout_flag_refuses_nan_infinities_and_negatives(
        tmp_path):
    flags = _cli_timeout_flags()
    in_sources = set()
    for source in (ROOT / "tools").glob("*.cc"):
        in_sources |= set(re.findall(r'"(--[\w-]*timeout[\w-]*)',
                                     source.read_text("utf-8")))
    assert in_sources, "no tools/*.cc under " + str(ROOT)
    assert in_sources == {flag for _, flag in flags}, (in_sources, flags)
    unknown = sorted(flags - set(CLI_FLAGS))
    assert not unknown, (
        f"CLI timeout flags without a checked refusal: {unknown}; refuse "
        "NaN, the infinities and negative values and add them here")
    assert sorted(flags) == sorted(CLI_FLAGS)
    for (command, flag), (args, low, high) in sorted(CLI_FLAGS.items()):
        for value in ("nan", "inf", "-inf", "-1"):
            start = time.monotonic()
            proc = subprocess.run(
                [CLI, *command.split(), *args, f"{flag}={value}"],
                capture_output=True, text=True, timeout=60, cwd=tmp_path)
            assert time.monotonic() - start < QUICK_SECONDS, (command, value)
            assert proc.returncode == 1, (command, value, proc.stderr)
            assert proc.stdout == ""
            assert proc.stderr == (
                f"reshard: error: {flag} must be a number of seconds from "
                f"{low} to {high}, not '{value}'\n"), (command, value)
    assert os.listdir(tmp_path) == []
