#!/usr/bin/env python3
"""README.md stays a first-day page: at most 250 lines, the generated
benchmark table's markers present, and every relative link in README.md
and docs/*.md pointing at a file that exists (and, for README.md#anchor
or page.md#anchor, at a heading that exists).

Usage: readme_test.py REPO_ROOT
"""

import os
import re
import sys

MAX_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path):
    """GitHub-style anchors of the headings of a Markdown file."""
    out = set()
    with open(path, encoding="utf-8") as f:
        in_code = False
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"^#+\s+(.*?)\s*$", line)
            if m:
                a = m.group(1).strip().lower()
                a = re.sub(r"[^\w\- ]", "", a).replace(" ", "-")
                out.add(a)
    return out


def check_links(root, page, errors):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) \
            if path else page
        if not os.path.exists(dest):
            errors.append("%s: link to missing %s" %
                          (os.path.relpath(page, root), target))
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            errors.append("%s: link to missing anchor %s" %
                          (os.path.relpath(page, root), target))


def main():
    root = sys.argv[1]
    readme = os.path.join(root, "README.md")
    errors = []
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    n = text.count("\n")
    if n > MAX_LINES:
        errors.append("README.md has %d lines; at most %d (details belong "
                      "in docs/)" % (n, MAX_LINES))
    for marker in ("<!-- bench-summary:begin -->",
                   "<!-- bench-summary:end -->"):
        if text.count(marker) != 1:
            errors.append("README.md must carry %s once" % marker)
    pages = [readme] + sorted(
        os.path.join(root, "docs", p) for p in os.listdir(
            os.path.join(root, "docs")) if p.endswith(".md"))
    for page in pages:
        check_links(root, page, errors)
    for e in errors:
        print("readme_test: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
