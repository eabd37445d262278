#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (default 80 lines).

Usage: function_lengths.py [--limit N] [--top K] [--tree ROOT] FILE...

--tree ROOT adds every .cc and .h under ROOT's include/, src/, tools/,
bench/, examples/, fuzz/ and testing/ except tests (*_test.cc).

A function is a brace block at namespace or class scope whose head ends in
a parameter list (optionally followed by qualifiers, an initializer list or
a trailing return type). Lambdas and nested blocks count towards their
enclosing function. Strings, characters and comments are skipped. Exits 1
when a function exceeds the limit.
"""
import os
import re
import sys

TREE_DIRS = ('include', 'src', 'tools', 'bench', 'examples', 'fuzz', 'testing')


def tree_files(root):
    for top in TREE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d != 'corpus')
            for name in sorted(filenames):
                if name.endswith(('.cc', '.h')) and not name.endswith('_test.cc'):
                    yield os.path.join(dirpath, name)

SCOPE_HEAD = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$')
NOT_FUNC = re.compile(r'(^|[^\w])(if|for|while|switch|catch|do|else)\s*(\(|$)')


def strip(text):
    """Replaces comments and literals by spaces, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ')' + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            j += 1
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and j - i > 3:
                out.append(c)
                i += 1
                continue
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path):
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    stack = []  # (kind, start_line, name)
    head_start = 0
    line = 1
    for i, c in enumerate(text):
        if c == '\n':
            line += 1
        elif c == '{':
            head = text[head_start:i]
            head_flat = ' '.join(head.split())
            in_func = any(k == 'func' for k, _, _ in stack)
            kind = 'block'
            name = ''
            if not in_func:
                if SCOPE_HEAD.search(head_flat) or head_flat.endswith('extern "C"'):
                    kind = 'scope'
                elif (')' in head_flat and not NOT_FUNC.search(head_flat)
                      and not head_flat.rstrip().endswith('=')):
                    m = re.search(r'([~\w:]+(?:operator\s*\S+)?)\s*\(', head_flat)
                    if m:
                        kind = 'func'
                        name = m.group(1)
            stack.append((kind, line, name))
            head_start = i + 1
        elif c == '}':
            if stack:
                kind, start, name = stack.pop()
                if kind == 'func':
                    yield name, start, line - start + 1
            head_start = i + 1
        elif c == ';':
            head_start = i + 1
        elif c == ':' and stack and stack[-1][0] == 'scope':
            # public:/private: labels end a head.
            if text[head_start:i].strip() in ('public', 'private', 'protected'):
                head_start = i + 1


def main(argv):
    limit, top, files = 80, 0, []
    it = iter(argv)
    for a in it:
        if a == '--limit':
            limit = int(next(it))
        elif a == '--top':
            top = int(next(it))
        elif a == '--tree':
            files.extend(tree_files(next(it)))
        else:
            files.append(a)
    rows = []
    for f in files:
        for name, start, length in functions(f):
            rows.append((length, f, start, name))
    rows.sort(reverse=True)
    shown = rows[:top] if top else [r for r in rows if r[0] > limit]
    for length, f, start, name in shown:
        print(f'{length:5d}  {f}:{start}  {name}')
    return 1 if any(r[0] > limit for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
