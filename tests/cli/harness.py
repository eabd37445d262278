"""The shared runner of the CLI test scripts: register tests with
@SUITE.test, fail them with check() or Failure, run them with SUITE.run().

Prints one line per test and a final line 'N passed, M failed'. Standard
library only.
"""

import subprocess
import sys
import tempfile
import traceback


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def run_cli(binary, *args, timeout=120):
    """The finished process of `binary *args` (text output captured)."""
    return subprocess.run([binary, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def expect_ok(r, what):
    check(r.returncode == 0, "%s failed (%d): %s" % (what, r.returncode,
                                                     r.stderr.strip()))
    return r


def expect_error(r, message):
    """Exit 1 and exactly the one line `reshard: error: MESSAGE`."""
    check(r.returncode == 1, "expected exit 1, got %d: %s" %
          (r.returncode, r.stderr))
    err = r.stderr.strip()
    check(err == "reshard: error: " + message,
          "stderr is\n  %r\nnot\n  %r" % (err, "reshard: error: " + message))


class Suite:
    def __init__(self):
        self.tests = []

    def test(self, fn):
        self.tests.append(fn)
        return fn

    def run(self, prefix, on_tmp):
        """Runs every test inside one temporary directory, handed to
        on_tmp(path) first; returns the process exit code."""
        passed = failed = 0
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            on_tmp(tmp)
            for fn in self.tests:
                try:
                    fn()
                except Failure as exc:
                    failed += 1
                    print("FAIL %s: %s" % (fn.__name__, exc))
                except Exception:  # noqa: BLE001 - report and keep going
                    failed += 1
                    print("FAIL %s: unexpected exception\n%s" %
                          (fn.__name__, traceback.format_exc()))
                else:
                    passed += 1
                    print("PASS %s" % fn.__name__)
                sys.stdout.flush()
        print("%d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
