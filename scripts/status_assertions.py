#!/usr/bin/env python3
"""Finds, and with --fix rewrites, test assertions that drop a status message.

`ASSERT_TRUE(r.ok()) << r.status().ToString();` prints the status only when
someone remembered the streamed tail; `EXPECT_TRUE(st.ok())` never does. The
macros of testing/status_testing.h always print it:

  ASSERT_TRUE(E.ok()) [<< ...];   ->  ASSERT_OK(E) [<< context];
  EXPECT_TRUE(E.ok()) [<< ...];   ->  EXPECT_OK(E) [<< context];
  ASSERT_TRUE(p->ok()) [<< ...];  ->  ASSERT_OK(*p) [<< context];

where the streamed parts that only repeat the status (E.status().ToString(),
E.ToString(), E.message(), ...) are dropped, and a trailing ": " separator
left before them goes too. With --assign (after --fix), a declaration
checked right away,

  auto r = MakeX();
  ASSERT_OK(r);

becomes `ASSERT_OK_AND_ASSIGN(auto r, MakeX());` when every later use of r
in its block unwraps it (*r, r->, r.value(), std::move(r).value()); those
uses are unwrapped accordingly. Anything the rules do not cover (compound
conditions, macros with line continuations) is left alone and listed.

With --status-is, a code check followed by a message check of the same
status (after an optional ASSERT_FALSE/EXPECT_FALSE(E.ok())) becomes one
EXPECT_THAT(E, StatusIs(code, message)) (ASSERT_THAT after an ASSERT_).
The rewritten files get the include of testing/status_testing.h and the
using-declaration of StatusIs they need.

Usage:
  scripts/status_assertions.py FILES...            list what drops a status
                                                   (exit 1 if anything)
  scripts/status_assertions.py --fix [--assign] [--status-is] FILES...
                                                   rewrite in place, print
                                                   the counts per file
Run clang-format -i on the rewritten files afterwards.
"""

import argparse
import re
import sys

ASSERTION = re.compile(r"\b(ASSERT|EXPECT)_TRUE\(")


def mask(text):
    """`text` with string/char literals and comments replaced by spaces
    (same length), so that brackets and `;` in them do not count."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c == '"' and text[max(0, i - 1)] == "R" and text[i + 1:i + 2] != ")":
            # Raw string R"delim(...)delim".
            open_paren = text.find("(", i)
            delim = text[i + 1:open_paren]
            j = text.find(")" + delim + '"', open_paren) + len(delim) + 2
            for k in range(i + 1, j - 1):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, j):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def matching(masked, open_index):
    """Index of the bracket closing the one at `open_index`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for i in range(open_index, len(masked)):
        c = masked[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


def top_level_split(text, masked, sep):
    """Splits `text` at occurrences of `sep` outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and masked.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
            i += len(sep)
            continue
        i += 1
    parts.append(text[start:])
    return parts


def squash(s):
    return re.sub(r"\s+", "", s)


def has_top_level(masked_expr, tokens):
    depth = 0
    for i, c in enumerate(masked_expr):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and any(masked_expr.startswith(t, i) for t in tokens):
            return True
    return False


def checked_expression(inner, masked_inner):
    """For `inner` == "E.ok()" (or "p->ok()"), the Status/Result expression
    ASSERT_OK should take; None when `inner` is anything else."""
    m = re.search(r"(\.|->)\s*ok\s*\(\s*\)\s*$", masked_inner)
    if not m:
        return None
    expr = inner[:m.start()].strip()
    masked_expr = masked_inner[:m.start()].strip()
    if not expr or has_top_level(masked_expr, ["&&", "||", "?", ",", "=="]):
        return None
    if masked_expr.startswith("!"):
        return None
    if m.group(1) == "->":
        if not re.fullmatch(r"[A-Za-z_]\w*", expr):
            return None
        return "*" + expr
    return expr


def redundant(part, expr):
    """Whether a streamed part only repeats the status of `expr`."""
    p = squash(part)
    e = squash(expr).lstrip("*")
    names = {e, "(" + e + ")"}
    for name in names:
        for suffix in (".status().ToString()", ".ToString()",
                       ".status().message()", ".message()",
                       "->status().ToString()", "->ToString()",
                       "->message()", "->status().message()"):
            if p == name + suffix:
                return True
    return False


def trim_separator(parts):
    """Drops a trailing separator literal (": ", " ") left before a dropped
    status, or trims it off the end of the last literal."""
    if not parts:
        return parts
    last = parts[-1].strip()
    m = re.fullmatch(r'"(.*?)(:\s*|\s+|\\n)"', last, re.S)
    if m:
        if m.group(1):
            parts[-1] = ' "' + m.group(1) + '" '
        else:
            parts.pop()
    return parts


def rewrite_assertions(text, path, report):
    masked = mask(text)
    out, pos, count = [], 0, {"ASSERT": 0, "EXPECT": 0}
    for m in ASSERTION.finditer(masked):
        if m.start() < pos:
            continue
        open_index = m.end() - 1
        close = matching(masked, open_index)
        if close < 0:
            continue
        inner = text[open_index + 1:close]
        expr = checked_expression(inner, masked[open_index + 1:close])
        if expr is None:
            continue
        end = masked.find(";", close)
        tail = text[close + 1:end]
        masked_tail = masked[close + 1:end]
        line = text.count("\n", 0, m.start()) + 1
        if "\\\n" in text[m.start():end]:
            report.append(f"{path}:{line}: left alone (line continuation)")
            continue
        if masked_tail.strip() and not masked_tail.strip().startswith("<<"):
            report.append(f"{path}:{line}: left alone (unexpected tail)")
            continue
        parts = []
        if masked_tail.strip():
            raw = top_level_split(tail, masked_tail, "<<")[1:]
            if raw and redundant(raw[0], expr):
                # A separator right after a leading status goes with it.
                raw = raw[1:]
                if raw and re.fullmatch(r'"(:?\s*|\\n)"', raw[0].strip()):
                    raw = raw[1:]
            parts = [p for p in raw if not redundant(p, expr)]
            if len(parts) != len(raw):
                parts = trim_separator(parts)
        kind = m.group(1)
        new = f"{kind}_OK({expr})"
        if parts:
            new += " << " + " << ".join(p.strip() for p in parts)
        out.append(text[pos:m.start()])
        out.append(new)
        pos = end
        count[kind] += 1
    out.append(text[pos:])
    return "".join(out), count


DECL = re.compile(
    r"^([ \t]*)((?:const\s+)?auto)\s+([A-Za-z_]\w*)\s*=\s*", re.M)
UNWRAP = [  # (pattern on the masked text, replacement); NAME is substituted
    (r"std::move\(\s*NAME\s*\)\s*\.\s*(?:value|ValueOrDie)\(\s*\)",
     "std::move(NAME)"),
    (r"\*\s*std::move\(\s*NAME\s*\)", "std::move(NAME)"),
    (r"(?<![\w.>])NAME\s*\.\s*value\(\s*\)", "NAME"),
    (r"(?<![\w.>])NAME\s*->", "NAME."),
    (r"(?<![\w)\]])\*\s*NAME\b(?!\s*(?:\.|->|\(|\[))", "NAME"),
]


def rewrite_assigns(text, path):
    count = 0
    while True:
        masked = mask(text)
        done = True
        for m in DECL.finditer(masked):
            name = m.group(3)
            rhs_start = m.end()
            end = masked.find(";", rhs_start)
            # The value expression must not hold a top-level comma (a
            # macro argument) nor be a lambda or a braced list.
            rhs = text[rhs_start:end]
            masked_rhs = masked[rhs_start:end]
            if has_top_level(masked_rhs, [","]) or masked_rhs.lstrip()[:1] in (
                    "[", "{"):
                continue
            after = re.match(r"\s*ASSERT_OK\(\s*" + name + r"\s*\)\s*;",
                             masked[end + 1:])
            if not after:
                continue
            check_end = end + 1 + after.end()
            # The rest of the enclosing block.
            depth, block_end = 0, len(text)
            for i in range(check_end, len(masked)):
                if masked[i] == "{":
                    depth += 1
                elif masked[i] == "}":
                    if depth == 0:
                        block_end = i
                        break
                    depth -= 1
            body = text[check_end:block_end]
            masked_body = masked[check_end:block_end]
            if re.search(r"\b(?:auto|[A-Za-z_]\w*>)\s*&*\s*" + name + r"\b",
                         masked_body):
                continue  # redeclared (shadowed) later: leave it alone
            new_body, new_masked = body, masked_body
            for pattern, replacement in UNWRAP:
                pat = re.compile(pattern.replace("NAME", name))
                rep = replacement.replace("NAME", name)
                spans = [s.span() for s in pat.finditer(new_masked)]
                for a, b in reversed(spans):
                    new_body = new_body[:a] + rep + new_body[b:]
                    new_masked = new_masked[:a] + rep + new_masked[b:]
            # Whatever use of the name is left must now be the value itself
            # only where it was unwrapped: a bare use of the Result (r.ok(),
            # r.status(), f(r)) would change meaning.
            uses_before = len(re.findall(r"(?<![\w.>])" + name + r"\b",
                                         masked_body))
            unwrapped = sum(
                len(re.findall(p.replace("NAME", name), masked_body))
                for p, _ in UNWRAP)
            if uses_before != unwrapped:
                continue
            lhs = f"{m.group(2)} {name}"
            new = (f"{m.group(1)}ASSERT_OK_AND_ASSIGN({lhs}, {rhs.strip()});")
            text = text[:m.start()] + new + new_body + text[block_end:]
            count += 1
            done = False
            break
        if done:
            return text, count


def statement_at(text, masked, start, macro):
    """(args, end) of `macro(args);` starting at `start` (after blanks),
    or None."""
    m = re.compile(r"\s*" + macro + r"\(").match(masked, start)
    if not m:
        return None
    close = matching(masked, m.end() - 1)
    if close < 0 or not re.match(r"\s*;", masked[close + 1:]):
        return None
    end = masked.index(";", close) + 1
    return text[m.end():close], masked[m.end():close], end


CODE_CHECK = re.compile(r"\b(ASSERT|EXPECT)_EQ\(")


def rewrite_status_is(text):
    """EXPECT_EQ(E.status().code(), C); EXPECT_EQ(E.status().message(), M);
    (after an optional ASSERT_FALSE/EXPECT_FALSE(E.ok());) becomes one
    EXPECT_THAT(E, StatusIs(C, M)) (ASSERT_THAT after an ASSERT_)."""
    count = 0
    pos = 0
    while True:
        masked = mask(text)
        m = CODE_CHECK.search(masked, pos)
        if not m:
            return text, count
        pos = m.end()
        first = statement_at(text, masked, m.start(), m.group(1) + "_EQ")
        if not first:
            continue
        args, margs, end = first
        split = top_level_split(args, margs, ",")
        if len(split) != 2:
            continue
        code_of = re.fullmatch(r"\s*(.+?)\s*(?:\.|->)\s*code\(\s*\)\s*",
                               split[0], re.S)
        if not code_of:
            continue
        holder = code_of.group(1)
        status_expr = re.sub(r"\s*\.\s*status\(\s*\)$", "", holder)
        code = split[1].strip()
        # The message check right after it.
        msg = None
        for macro in ("EXPECT_EQ", "EXPECT_THAT", "ASSERT_EQ", "ASSERT_THAT"):
            second = statement_at(text, masked, end, macro)
            if not second:
                continue
            margs2 = top_level_split(second[0], second[1], ",")
            if len(margs2) != 2:
                continue
            if squash(margs2[0]) != squash(holder) + ".message()":
                continue
            msg, end2 = margs2[1].strip(), second[2]
            break
        if msg is None:
            continue
        # An ok() check right before it, on its own line.
        kind = m.group(1)
        begin = m.start()
        before = re.search(
            r"(ASSERT|EXPECT)_FALSE\(\s*" + re.escape(status_expr) +
            r"\s*\.\s*ok\(\s*\)\s*\)\s*;\s*$", masked[:m.start()])
        if before:
            begin = before.start()
            if before.group(1) == "ASSERT":
                kind = "ASSERT"
        new = (f"{kind}_THAT({status_expr.strip()}, StatusIs({code}, {msg}));")
        text = text[:begin] + new + text[end2:]
        count += 1
        pos = begin + len(new)


def add_declarations(text, path, report):
    """The include of testing/status_testing.h and the using-declaration of
    StatusIs where the rewritten text needs them."""
    if re.search(r"#define\s+(ASSERT_OK|EXPECT_OK)\b", text):
        report.append(f"{path}: defines its own ASSERT_OK/EXPECT_OK "
                      "(remove it by hand)")
    uses = re.search(r"\b(ASSERT_OK|EXPECT_OK|ASSERT_OK_AND_ASSIGN)\(|"
                     r"\bStatusIs\(", text)
    if uses and '#include "testing/status_testing.h"' not in text:
        lines = text.split("\n")
        first_code = next(i for i, l in enumerate(lines)
                          if l.startswith("namespace"))
        last = max(i for i, l in enumerate(lines[:first_code])
                   if l.startswith('#include "'))
        lines.insert(last + 1, '#include "testing/status_testing.h"')
        text = "\n".join(lines)
    using = "using ::reshard::testing::StatusIs;"
    if re.search(r"(?<![:\w])StatusIs\(", text) and using not in text:
        lines = text.split("\n")
        anon = lines.index("namespace {")
        run = [i for i in range(anon + 1, min(anon + 40, len(lines)))
               if lines[i].startswith("using ::")]
        if run:
            start = run[0]
            end = start
            while lines[end].startswith("using ::"):
                end += 1
            lines[start:end] = sorted(lines[start:end] + [using])
        else:
            lines[anon + 1:anon + 1] = ["", using]
        text = "\n".join(lines)
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fix", action="store_true")
    parser.add_argument("--assign", action="store_true")
    parser.add_argument("--status-is", action="store_true")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    report, total = [], {"ASSERT": 0, "EXPECT": 0, "ASSIGN": 0,
                         "STATUS_IS": 0}
    for path in args.files:
        with open(path) as f:
            text = f.read()
        new, count = rewrite_assertions(text, path, report)
        assigns = 0
        if args.fix and args.assign:
            new, assigns = rewrite_assigns(new, path)
        status_is = 0
        if args.fix and args.status_is:
            new, status_is = rewrite_status_is(new)
        if args.fix:
            new = add_declarations(new, path, report)
            if new != text:
                with open(path, "w") as f:
                    f.write(new)
            print(f"{path}: ASSERT_OK {count['ASSERT']}, EXPECT_OK "
                  f"{count['EXPECT']}, ASSERT_OK_AND_ASSIGN {assigns}, "
                  f"StatusIs {status_is}")
        else:
            masked = mask(text)
            for m in ASSERTION.finditer(masked):
                close = matching(masked, m.end() - 1)
                inner = masked[m.end():close]
                if re.search(r"(\.|->)\s*ok\s*\(\s*\)", inner):
                    line = text.count("\n", 0, m.start()) + 1
                    report.append(f"{path}:{line}: drops the status message")
        total["ASSERT"] += count["ASSERT"]
        total["EXPECT"] += count["EXPECT"]
        total["ASSIGN"] += assigns
        total["STATUS_IS"] += status_is
    for line in report:
        print(line)
    if args.fix:
        print(f"total: ASSERT_OK {total['ASSERT']}, EXPECT_OK "
              f"{total['EXPECT']}, ASSERT_OK_AND_ASSIGN {total['ASSIGN']}, "
              f"StatusIs {total['STATUS_IS']}")
        return 0
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
