"""README's Python quick start is examples/python/quickstart.py, and it runs."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_block_is_the_example():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Python quick start", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert block == (ROOT / "examples/python/quickstart.py").read_text()


def test_quickstart_runs_and_checks_every_byte():
    proc = subprocess.run([sys.executable, "examples/python/quickstart.py"],
                          cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("moved 768 bytes in 8 regions; every byte "
                           "checked\n")
