#!/usr/bin/env python3
"""Every validation rule the code cites is listed in docs/validation-rules.md.

Usage: rule_citations_test.py REPO_ROOT

Scans src/, include/, tools/, testing/ and python/ for citations such as
"rule 23", "Rule 56:", "rules 57-60", "Rules 11, 12 and 14" or
"rules 3, 5, 6, 10 and 16", expands ranges and lists, and fails naming
every cited rule (with one place that cites it) that has no row
"| N |" in the document's rule table.
"""

import os
import re
import sys

SCAN = ("src", "include", "tools", "testing", "python")
SUFFIXES = (".cc", ".h", ".py", ".cmake", ".txt")
# "rule 5", "rules 5-7", "rules 5, 6 and 8", "rules 56, 65, 67"
CITATION = re.compile(
    r"\b[Rr]ules?\s+(\d+(?:\s*(?:-|–|,|and|to)\s*\d+)*)")


def cited_numbers(text):
    """The rule numbers cited in `text`, each with its offset."""
    for m in CITATION.finditer(text):
        spec = m.group(1)
        for part in re.split(r"\s*(?:,|and)\s*", spec):
            bounds = re.split(r"\s*(?:-|–|to)\s*", part.strip())
            if len(bounds) == 2 and bounds[0] and bounds[1]:
                lo, hi = int(bounds[0]), int(bounds[1])
                if lo <= hi and hi - lo < 100:
                    for n in range(lo, hi + 1):
                        yield n, m.start()
                    continue
            for b in bounds:
                if b:
                    yield int(b), m.start()


def citations(root):
    found = {}
    for top in SCAN:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if x not in ("__pycache__", "build")]
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(d, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for n, at in cited_numbers(text):
                    line = text.count("\n", 0, at) + 1
                    found.setdefault(n, "%s:%d" % (os.path.relpath(path, root),
                                                   line))
    return found


def documented(root):
    with open(os.path.join(root, "docs", "validation-rules.md"),
              encoding="utf-8") as f:
        text = f.read()
    return {int(n) for n in re.findall(r"^\| (\d+) \|", text, re.M)}


def self_check():
    got = sorted({n for n, _ in cited_numbers(
        "rule 1; Rules 7-9; rules 3, 5, 6, 10 and 16; rules 56, 65, 67; "
        "Rules 11, 12 and 14; (rule 23)")})
    want = [1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 23, 56, 65, 67]
    assert got == want, got


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    self_check()
    cited = citations(root)
    listed = documented(root)
    missing = sorted(set(cited) - listed)
    for n in missing:
        print("rule_citations: rule %d is cited at %s but not listed in "
              "docs/validation-rules.md" % (n, cited[n]), file=sys.stderr)
    if not cited:
        print("rule_citations: no rule citations found under %s" % root,
              file=sys.stderr)
        return 1
    if not missing:
        print("rule_citations: %d cited rules, all listed (%d rows)" %
              (len(cited), len(listed)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
