#!/usr/bin/env python3
"""Lists source files longer than a limit (default 800 lines).

Usage: file_lengths.py [--limit N] [--tree ROOT] FILE...

A source file is C++, CUDA or Python: a name ending in .cc, .cpp, .h,
.hpp, .cu, .cuh or .py. --tree ROOT adds every source file under ROOT's
include/, src/, tools/, bench/, examples/, fuzz/, testing/, scripts/ and
python/reshard/, headers included, tests excepted: *_test.cc, *_test.py
and test_*.py files, and the folders tests/ (python/tests/, tests/) and
fuzz corpora. A line is a line as `wc -l` counts it, plus an unterminated
last line. Prints "LINES  PATH" for each file over the limit, longest
first, and exits 1 when there is one.
"""
import os
import sys

TREE_DIRS = ('include', 'src', 'tools', 'bench', 'examples', 'fuzz',
             'testing', 'scripts', os.path.join('python', 'reshard'))
SOURCE_SUFFIXES = ('.cc', '.cpp', '.h', '.hpp', '.cu', '.cuh', '.py')
SKIPPED_DIRS = ('tests', 'corpus', '__pycache__')


def is_test(name):
    return (name.endswith(('_test.cc', '_test.py')) or
            (name.startswith('test_') and name.endswith('.py')))


def tree_files(root):
    for top in TREE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES) and not is_test(name):
                    yield os.path.join(dirpath, name)


def count_lines(path):
    with open(path, 'rb') as f:
        data = f.read()
    return data.count(b'\n') + (1 if data and not data.endswith(b'\n') else 0)


def main(argv):
    limit, files = 800, []
    it = iter(argv)
    for a in it:
        if a == '--limit':
            limit = int(next(it))
        elif a == '--tree':
            files.extend(tree_files(next(it)))
        else:
            files.append(a)
    rows = sorted(((count_lines(f), f) for f in files),
                  key=lambda r: (-r[0], r[1]))
    over = [r for r in rows if r[0] > limit]
    for lines, f in over:
        print(f'{lines:5d}  {f}')
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
