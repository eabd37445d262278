"""``python3 -m reshard ARGS...``: the ``reshard`` command line.

Runs the CLI binary installed inside the package (``reshard/bin/reshard``,
put there by ``pip install .`` and ``make install-python``) with the same
arguments, replacing this process, so its exit status, standard streams and
terminal are the CLI's own. In a build tree (``PYTHONPATH=build/python``)
there is no binary beside the package: the message names the build's
``build/reshard`` instead.
"""

import os
import sys


def cli_path():
    """The bundled CLI binary's path (it may not exist)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "reshard")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    path = cli_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(
            f"reshard: error: no CLI binary at {path} (installed by `pip install .` "
            "or `make install-python`; in a build tree run build/reshard)\n"
        )
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path, *args])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
