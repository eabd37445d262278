#!/usr/bin/env python3
"""Fails when code outside the UCX exchange names UCX.

Usage: ucx_confined.py --tree ROOT

Scans the C++ under ROOT's include/, src/, tools/, testing/, bench/,
examples/ and fuzz/ and the Python under python/reshard/, tests excepted
(*_test.cc files; python/tests/). Once
comments and string literals are removed, no identifier may contain "ucx"
in any case, and no #include may name a UCX header (ucp/, ucs/, uct/),
live_ucx/ or reshard/backends/ucx_options.h. Exempt:
  - src/live_ucx/ and include/reshard/backends/ucx_options.h: the UCX
    exchange and its options;
  - the documented aliases in ALIASES (a name users already call).
So the live session, the SDK, the self-test, the CLI (whose --ucx-* flags
are the exchange's own, PeerExchangeBackend::flags), the Python bindings
and the package reach UCX only through the neutral peer exchange
(reshard/sdk/peer_exchange.h): an exchange by name, its settings by name.
Prints "PATH:LINE: what" for each offence and exits 1 when there is one.
"""
import io
import os
import re
import sys
import tokenize

EXEMPT_DIRS = (os.path.join('src', 'live_ucx'),)
EXEMPT_FILES = (os.path.join('include', 'reshard', 'backends',
                             'ucx_options.h'),)
BACKEND_HEADER = 'reshard/backends/ucx_options.h'
# path -> identifiers kept as documented aliases.
ALIASES = {
    # LiveSession(ucx_tls=T) is exchange_options={"tls": T} (docs/live.md).
    os.path.join('python', 'reshard', '_api.py'): {'ucx_tls'},
}
UCX = re.compile(r'ucx', re.IGNORECASE)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
UCX_INCLUDE = re.compile(r'^(ucp/|ucs/|uct/|live_ucx/|' +
                         re.escape(BACKEND_HEADER) + ')')
# Comments and literals, in one pass so that "//" inside a string stays.
CPP_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"'
                       r'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
IDENT = re.compile(r'[A-Za-z_][A-Za-z_0-9]*')


def blank(match):
    """The match with everything but its newlines removed."""
    return '\n' * match.group(0).count('\n')


def cpp_offences(text):
    out = []
    for m in INCLUDE.finditer(text):
        if UCX_INCLUDE.match(m.group(1)):
            out.append((text.count('\n', 0, m.start()) + 1,
                        '#include "' + m.group(1) + '"'))
    code = CPP_NOISE.sub(blank, INCLUDE.sub('', text))
    for line_no, line in enumerate(code.split('\n'), 1):
        for ident in IDENT.findall(line):
            if UCX.search(ident):
                out.append((line_no, ident))
    return out


def python_offences(text, aliases):
    out = []
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    for tok in tokens:
        if (tok.type == tokenize.NAME and UCX.search(tok.string) and
                tok.string not in aliases):
            out.append((tok.start[0], tok.string))
    return out


def tree_files(root):
    for top, suffixes in (('include', ('.h',)), ('src', ('.h', '.cc')),
                          ('tools', ('.h', '.cc')),
                          ('testing', ('.h', '.cc')),
                          ('bench', ('.h', '.cc')),
                          ('examples', ('.h', '.cc')),
                          ('fuzz', ('.h', '.cc')),
                          (os.path.join('python', 'reshard'), ('.py',))):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in ('tests', '__pycache__'))
            for name in sorted(filenames):
                if name.endswith(suffixes) and not name.endswith('_test.cc'):
                    yield os.path.join(dirpath, name)


def offences(root):
    found, scanned = [], 0
    for path in tree_files(root):
        rel = os.path.relpath(path, root)
        if rel in EXEMPT_FILES or rel.startswith(EXEMPT_DIRS):
            continue
        scanned += 1
        with open(path, encoding='utf-8') as f:
            text = f.read()
        if rel.endswith('.py'):
            hits = python_offences(text, ALIASES.get(rel, set()))
        else:
            hits = cpp_offences(text)
        found.extend(f'{rel}:{line}: {what}' for line, what in hits)
    return found, scanned


def main(argv):
    if len(argv) != 2 or argv[0] != '--tree':
        print(__doc__, file=sys.stderr)
        return 2
    found, scanned = offences(argv[1])
    if scanned < 100:
        print(f'found only {scanned} files under {argv[1]}', file=sys.stderr)
        return 2
    for line in found:
        print(line)
    if found:
        print(f'UCX named outside src/live_ucx/ and {BACKEND_HEADER}',
              file=sys.stderr)
        return 1
    print(f'{scanned} files: UCX confined to src/live_ucx/ and '
          f'{BACKEND_HEADER}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
