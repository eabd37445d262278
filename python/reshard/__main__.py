"""``python3 -m reshard ARGS...``: the ``reshard`` command line.

Runs the CLI binary installed inside the package (``reshard/bin/reshard``,
put there by ``pip install .`` and ``make install-python``) with the same
arguments, replacing this process, so its exit status, standard streams and
terminal are the CLI's own: with standard output closed (``>&-``) or full,
a command that prints fails as the CLI does, with one error line and status
1. In a build tree (``PYTHONPATH=build/python``) there is no binary beside
the package: the message names the build's ``build/reshard`` instead.
"""

import os
import sys


def cli_path():
    """The bundled CLI binary's path (it may not exist)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "reshard")


def _error(message):
    """One line on standard error, if there is one (``2>&-`` closes it)."""
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(f"reshard: error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    path = cli_path()
    if not os.access(path, os.X_OK):
        _error(
            f"no CLI binary at {path} (installed by `pip install .` "
            "or `make install-python`; in a build tree run build/reshard)"
        )
        return 1
    # A closed stream (``>&-``) is None here: the CLI, given the same
    # closed descriptor, reports a failed write itself as one line.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    try:
        os.execv(path, [path, *args])
    except OSError as error:
        _error(f"cannot run {path}: {error.strerror}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
