#!/usr/bin/env python3
"""Tests of ucx_confined.py: the identifiers and includes it flags, and
what it exempts.

Usage: ucx_confined_test.py
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ucx_confined  # noqa: E402


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, 'w') as f:
        f.write(text)


class UcxConfinedTest(unittest.TestCase):

    def test_flags_identifiers_and_includes_outside_the_exchange(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, 'src/live/a.cc',
                  '#include "live_ucx/ucx_handles.h"\n'
                  '// UcxOptions in a comment is fine\n'
                  'const char* s = "ucx";  // a string is fine\n'
                  'UcxOptions o;\n')
            write(root, 'include/reshard/live.h', 'int use_ucx_tls = 0;\n')
            write(root, 'tools/x.cc', 'auto u = o.ucx;\n')
            write(root, 'python/reshard/_api.py',
                  'def f(ucx_tls="", ucx_net=""):\n    return "ucx"\n')
            found, scanned = ucx_confined.offences(root)
        self.assertEqual(scanned, 4)
        self.assertEqual(sorted(found), [
            'include/reshard/live.h:1: use_ucx_tls',
            'python/reshard/_api.py:1: ucx_net',
            'src/live/a.cc:1: #include "live_ucx/ucx_handles.h"',
            'src/live/a.cc:4: UcxOptions',
            'tools/x.cc:1: ucx',
        ])

    def test_exempts_only_the_exchange_and_its_header(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, 'src/live_ucx/ucx.cc', '#include <ucp/api/ucp.h>\n')
            write(root, 'include/reshard/backends/ucx_options.h',
                  'struct UcxOptions {};\n')
            write(root, 'tools/selftest.cc',
                  '#include "reshard/backends/ucx_options.h"\nUcxOptions o;\n')
            write(root, 'bench/live_bench.cc', 'auto f = "--ucx-tls";\n')
            write(root, 'src/live/b_test.cc', 'UcxOptions o;\n')
            write(root, 'src/live/c.cc', '#include <ucs/type/status.h>\n')
            found, scanned = ucx_confined.offences(root)
        self.assertEqual(scanned, 3)
        self.assertEqual(found, [
            'src/live/c.cc:1: #include "ucs/type/status.h"',
            'tools/selftest.cc:1: #include "reshard/backends/ucx_options.h"',
            'tools/selftest.cc:2: UcxOptions',
        ])


if __name__ == '__main__':
    unittest.main()
