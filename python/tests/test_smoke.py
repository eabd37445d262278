"""The package imports from build/python and is the one just built."""
import pathlib
import sys

import reshard


def test_imports_from_build_tree():
    assert sys.executable == "/usr/bin/python3" or sys.base_prefix == "/usr"
    assert pathlib.Path(reshard.__file__).parent.name == "reshard"
    assert issubclass(reshard.InvalidArgumentError, ValueError)
    assert issubclass(reshard.InvalidArgumentError, reshard.Error)
