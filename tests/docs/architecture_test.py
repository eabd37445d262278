#!/usr/bin/env python3
"""docs/architecture.md and the source layout match the tree.

Usage: architecture_test.py REPO_ROOT

Fails, naming each difference, when:
- a layer defined in CMakeLists.txt (reshard_layer(NAME ...)) has no row
  in the layer diagram of docs/architecture.md, or a row names no layer;
- a folder under src/ has no row `src/NAME/` in its table "What each
  folder owns", or a row names a folder that does not exist;
- the source layout of docs/getting-started.md lists a src/ folder that
  does not exist, or leaves one out;
- a page says how many coordinates `Dims` keeps in place ("N in place")
  with a number other than kInlineDims in include/reshard/dims.h.
"""

import os
import re
import sys

NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six",
           7: "seven", 8: "eight"}


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def cmake_layers(root):
    return set(re.findall(r"^reshard_layer\((\w+)", read(root,
                                                          "CMakeLists.txt"),
                          re.M))


def src_folders(root):
    src = os.path.join(root, "src")
    return {d for d in os.listdir(src)
            if os.path.isdir(os.path.join(src, d)) and d != "__pycache__"}


def section(text, heading):
    """The text under `## heading` up to the next `## `."""
    m = re.search(r"^## " + re.escape(heading) + r"\n(.*?)(?=^## |\Z)", text,
                  re.M | re.S)
    return m.group(1) if m else ""


def diagram_layers(arch):
    """The first word of each row of the layer diagram (its code block)."""
    m = re.search(r"```\n(.*?)```", section(arch, "Layers"), re.S)
    rows = set()
    for line in (m.group(1) if m else "").splitlines():
        m2 = re.match(r"^ (\w+)\s", line)
        if m2:
            rows.add(m2.group(1))
    return rows


def table_folders(arch):
    table = section(arch, "What each folder owns")
    return set(re.findall(r"^\| `src/(\w+)/`", table, re.M))


def layout_folders(getting_started):
    block = section(getting_started, "Source layout")
    return set(re.findall(r"^src/(\w+)/", block, re.M))


def check(root):
    errors = []
    arch = read(root, "docs/architecture.md")
    layers = cmake_layers(root)
    rows = diagram_layers(arch)
    # Rows that are no library of their own.
    programs = {"programs", "python"}
    for name in sorted(layers - rows):
        errors.append("docs/architecture.md: layer %s (CMakeLists.txt) has "
                      "no row in the layer diagram" % name)
    for name in sorted(rows - layers - programs):
        errors.append("docs/architecture.md: the layer diagram's row %s is "
                      "no reshard_layer() of CMakeLists.txt" % name)
    folders = src_folders(root)
    listed = table_folders(arch)
    for name in sorted(folders - listed):
        errors.append("docs/architecture.md: src/%s/ has no row in \"What "
                      "each folder owns\"" % name)
    for name in sorted(listed - folders):
        errors.append("docs/architecture.md: \"What each folder owns\" "
                      "lists src/%s/, which does not exist" % name)
    layout = layout_folders(read(root, "docs/getting-started.md"))
    for name in sorted(folders - layout):
        errors.append("docs/getting-started.md: the source layout leaves "
                      "out src/%s/" % name)
    for name in sorted(layout - folders):
        errors.append("docs/getting-started.md: the source layout lists "
                      "src/%s/, which does not exist" % name)
    m = re.search(r"kInlineDims = (\d+);", read(root,
                                                "include/reshard/dims.h"))
    if not m:
        errors.append("include/reshard/dims.h: no kInlineDims")
    else:
        want = NUMBERS[int(m.group(1))]
        for page in ("README.md", "docs/architecture.md"):
            for line in read(root, page).splitlines():
                if "Dims" not in line:
                    continue
                for said in re.findall(r"(\w+) in place", line):
                    if said != want:
                        errors.append("%s: Dims keeps %s values in place "
                                      "(kInlineDims), not %s" %
                                      (page, want, said))
    return errors


def main():
    errors = check(sys.argv[1])
    for e in errors:
        print("architecture_test: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
