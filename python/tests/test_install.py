"""`make install-python` installs an importable package under the prefix,
with the CLI inside it (`python3 -m reshard`)."""
import os
import pathlib
import subprocess
import sys


def test_install_python_component(tmp_path):
    build = os.environ["RESHARD_BUILD_DIR"]
    proc = subprocess.run(["cmake", "--install", build, "--prefix",
                           str(tmp_path), "--component", "python"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
        / "dist-packages"
    installed = sorted(p.name for p in (site / "reshard").iterdir())
    assert "__init__.py" in installed and "_api.py" in installed
    assert any(n.startswith("_reshard.") and n.endswith(".so") for n in installed)
    # Imported from the prefix alone, not from the build tree.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    code = ("import reshard, pathlib; print(pathlib.Path(reshard.__file__)"
            ".parent); print(reshard.ParallelRank(tp=1))")
    proc = subprocess.run(["/usr/bin/python3", "-c", code], env=env,
                          capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert pathlib.Path(lines[0]) == site / "reshard"
    assert lines[1] == "ParallelRank(dp=0, tp=1, pp=0, ep=0)"
    # The CLI inside the package: `python3 -m reshard` runs it.
    assert os.access(site / "reshard" / "bin" / "reshard", os.X_OK)
    data = pathlib.Path(os.environ["RESHARD_TEST_DATA"]) / "scenarios"
    proc = subprocess.run(["/usr/bin/python3", "-m", "reshard", "validate",
                           str(data / "tp_split_4_to_8_source.json"),
                           "--json"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"valid":true' in proc.stdout.replace(" ", "")
