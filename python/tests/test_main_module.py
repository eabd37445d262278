"""`python3 -m reshard` fails as the CLI does when its standard output
cannot be written: one error line, status 1, no Python traceback.

The package's ``__main__`` runs the CLI binary beside it
(``reshard/bin/reshard``); the build tree has none, so each test lays out
a package of the build's ``__main__.py`` with the build's CLI as its
binary.
"""

import os
import pathlib
import shutil
import subprocess

import reshard

CLI = os.environ.get("RESHARD_CLI", "build/reshard")
DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
SOURCE = str(DATA / "scenarios" / "tp_split_4_to_8_source.json")
CLOSED_STDOUT = "reshard: error: writing to standard output: Bad file " \
    "descriptor\n"


def package(tmp_path):
    """A `reshard` package of __main__.py with bin/reshard, on a path."""
    root = tmp_path / "site"
    (root / "reshard" / "bin").mkdir(parents=True)
    shutil.copy(pathlib.Path(reshard.__file__).parent / "__main__.py",
                root / "reshard" / "__main__.py")
    (root / "reshard" / "__init__.py").write_text("")
    os.symlink(os.path.abspath(CLI), root / "reshard" / "bin" / "reshard")
    return root


def run_closed(command, pythonpath=None):
    """`command` with its standard output closed (`>&-`)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(command, stdout=None, stderr=subprocess.PIPE,
                          env=env, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))


def test_python_m_reshard_with_stdout_closed_is_one_error_line(tmp_path):
    # The CLI itself: one line, status 1.
    direct = run_closed([CLI, "validate", SOURCE])
    assert (direct.returncode, direct.stderr) == (1, CLOSED_STDOUT)
    # Through the package's __main__ (which used to raise AttributeError on
    # the closed stream, sys.stdout being None): the same.
    proc = run_closed(["/usr/bin/python3", "-m", "reshard", "validate",
                       SOURCE], pythonpath=package(tmp_path))
    assert (proc.returncode, proc.stderr) == (1, CLOSED_STDOUT)
    # Standard error closed as well: status 1, nothing else to say.
    proc = subprocess.run(
        ["/usr/bin/python3", "-m", "reshard", "validate", SOURCE],
        env=dict(os.environ, PYTHONPATH=str(package(tmp_path / "2"))),
        timeout=60, preexec_fn=lambda: (os.close(1), os.close(2)))
    assert proc.returncode == 1


def test_python_m_reshard_with_stdout_full_is_one_error_line(tmp_path):
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            ["/usr/bin/python3", "-m", "reshard", "validate", SOURCE],
            env=dict(os.environ, PYTHONPATH=str(package(tmp_path))),
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        1, "reshard: error: writing to standard output: No space left on "
           "device\n")


def test_python_m_reshard_without_a_binary_is_one_error_line(tmp_path):
    root = package(tmp_path)
    os.remove(root / "reshard" / "bin" / "reshard")
    proc = run_closed(["/usr/bin/python3", "-m", "reshard", "validate",
                       SOURCE], pythonpath=root)
    binary = root / "reshard" / "bin" / "reshard"
    assert (proc.returncode, proc.stderr) == (
        1, f"reshard: error: no CLI binary at {binary} (installed by `pip "
           "install .` or `make install-python`; in a build tree run "
           "build/reshard)\n")
