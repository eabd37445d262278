"""The shared runner of the CLI test scripts: register tests with
@SUITE.test, fail them with check() or Failure, run them with SUITE.run().

Prints one line per test and a final line 'N passed, M failed'. Standard
library only.
"""

import sys
import tempfile
import traceback


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


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
