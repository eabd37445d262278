"""Input files named by a path: opened without ever blocking, and only if
they are regular files, as the C++ library and the CLI open theirs
(docs/reliability.md, "Inputs are regular files")."""

from __future__ import annotations

import os
import stat

from reshard import _reshard

# As the CLI's cap of config.json files.
MAX_CONFIG_BYTES = 64 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a file"


def _not_regular(path: str, mode: int) -> Exception:
    return _reshard.InvalidArgumentError(
        f"{path} is not a regular file ({_kind(mode)})")


def read_text(path: "str | os.PathLike", cap: int = MAX_CONFIG_BYTES,
              hint: str = "the cap of config.json files") -> str:
    """The UTF-8 text of the regular file `path` (links followed). The
    open never blocks (a FIFO with no writer, a device that waits for a
    peer); what is not a regular file is InvalidArgumentError "<path> is
    not a regular file (a FIFO)", a missing file NotFoundError, a file
    over `cap` bytes InvalidArgumentError naming the cap."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY |
                     getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _reshard.NotFoundError(
            f"cannot read {path}: No such file or directory") from None
    except OSError as e:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):  # a socket cannot be opened at all
            raise _not_regular(path, mode) from None
        raise _reshard.StoreIOError(
            f"cannot read {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
        data = f.read(cap + 1)
    if len(data) > cap:
        raise _reshard.InvalidArgumentError(
            f"{path} is larger than {cap} bytes ({hint})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _reshard.InvalidArgumentError(
            f"{path} is not UTF-8 text (byte {e.start})") from None
