#!/usr/bin/env python3
"""Tests of file_lengths.py: which files of a tree it reads, and that it
flags exactly the source files over the limit.

Usage: file_lengths_test.py
"""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import file_lengths  # noqa: E402


def write(root, path, lines, terminated=True):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    text = '\n'.join('x' for _ in range(lines))
    with open(full, 'w') as f:
        f.write(text + ('\n' if terminated and lines else ''))
    return full


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = file_lengths.main(argv)
    return code, out.getvalue()


class FileLengthsTest(unittest.TestCase):

    def test_flags_a_file_over_the_limit(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, 'src/plan/at_limit.cc', 800)
            long_cc = write(root, 'src/plan/long.cc', 801)
            long_h = write(root, 'include/reshard/long.h', 950)
            long_py = write(root, 'python/reshard/long.py', 802)
            code, out = run(['--tree', root])
        self.assertEqual(code, 1)
        self.assertEqual(out, '  950  %s\n  802  %s\n  801  %s\n' %
                         (long_h, long_py, long_cc))

    def test_passes_a_tree_within_the_limit(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, 'src/a.cc', 800)
            write(root, 'tools/b.h', 12)
            code, out = run(['--tree', root])
        self.assertEqual((code, out), (0, ''))

    def test_tests_and_other_files_are_excepted(self):
        with tempfile.TemporaryDirectory() as root:
            for path in ('src/store/weight_store_test.cc',
                         'testing/conformance_test.py',
                         'python/reshard/test_helpers.py',
                         'python/tests/big.py',
                         'src/tests/big.cc',
                         'fuzz/corpus/seed.cc',
                         'src/report/assets/report.js',
                         'src/report/report_assets.cc.in',
                         'docs/long.py',
                         'python/other/long.py'):
                write(root, path, 900)
            self.assertEqual(list(file_lengths.tree_files(root)), [])
            self.assertEqual(run(['--tree', root]), (0, ''))

    def test_every_source_kind_is_read(self):
        with tempfile.TemporaryDirectory() as root:
            paths = [write(root, 'src/k/f' + s, 1)
                     for s in ('.cc', '.cpp', '.cu', '.cuh', '.h', '.hpp',
                               '.py')]
            paths.append(write(root, 'scripts/tool.py', 1))
            paths.append(write(root, 'bench/b.cc', 1))
            paths.append(write(root, 'examples/e.cc', 1))
            paths.append(write(root, 'fuzz/f.cc', 1))
            self.assertEqual(sorted(file_lengths.tree_files(root)),
                             sorted(paths))

    def test_counts_lines_as_wc_does_plus_an_unterminated_last(self):
        with tempfile.TemporaryDirectory() as root:
            a = write(root, 'src/a.cc', 801, terminated=False)
            b = write(root, 'src/b.cc', 0)
            self.assertEqual(file_lengths.count_lines(a), 801)
            self.assertEqual(file_lengths.count_lines(b), 0)
            self.assertEqual(run(['--limit', '800', a]),
                             (1, '  801  %s\n' % a))
            self.assertEqual(run(['--limit', '801', a]), (0, ''))


if __name__ == '__main__':
    unittest.main()
