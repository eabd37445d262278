#!/usr/bin/env python3
"""Checks that README.md's library section stays true to the tree.

Usage: readme_check.py REPO_ROOT

- the C++ block under "## The library" is an exact excerpt of
  examples/reshard_example.cc (so the README shows code that compiles and
  runs as the reshard_example test);
- the header table lists every header of include/reshard/ once, nothing
  else, with reshard.h first.
"""

import os
import re
import sys


def library_section(readme):
    start = readme.index("## The library\n")
    end = readme.index("\n## ", start + 1)
    return readme[start:end]


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        section = library_section(f.read())
    with open(os.path.join(root, "examples", "reshard_example.cc"),
              encoding="utf-8") as f:
        example = f.read()
    errors = []
    blocks = re.findall(r"```c\+\+\n(.*?)```", section, re.S)
    if len(blocks) != 1:
        errors.append("expected one c++ block, found %d" % len(blocks))
    elif blocks[0] not in example:
        errors.append("the c++ block is not an excerpt of "
                      "examples/reshard_example.cc")
    listed = re.findall(r"^\| `([a-z_]+\.h)` \|", section, re.M)
    present = sorted(n for n in os.listdir(os.path.join(root, "include",
                                                        "reshard"))
                     if n.endswith(".h"))
    if sorted(listed) != present or len(set(listed)) != len(listed):
        errors.append("header table %s != include/reshard/ %s" %
                      (sorted(listed), present))
    if not listed or listed[0] != "reshard.h":
        errors.append("the header table must start with reshard.h")
    for e in errors:
        print("readme_check: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
