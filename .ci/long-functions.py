#!/usr/bin/env python3
"""Lists the production functions over LIMIT lines (default 80) in crates/*/src and exits 1 if any.

Test code is skipped: `tests.rs`, `*_tests.rs`, `testing/` and `tests/` folders, `#[cfg(test)]` modules and the
benchmark crate. A function that is long for a reason (a table, generated code) says so on the line above its
`fn`: `// tidy: long function (<reason>)`. Run from the project's root: `python3 .ci/long-functions.py [LIMIT]`.
The parser is line-based: it strips string literals and `//` comments, then counts braces."""
import os, re, sys
LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 80
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')
def strip(line):
    # drop string literals and line comments, crude
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find('//')
    return line if i < 0 else line[:i]
out = []
for root, dirs, files in os.walk('crates'):
    if '/tests' in root or root.endswith('tests') or '/testing' in root or 'askloop-bench' in root:
        continue
    for f in files:
        if not f.endswith('.rs') or f in ('tests.rs',) or f.endswith('_tests.rs'):
            continue
        p = os.path.join(root, f)
        if '/src/' not in p: continue
        lines = open(p).read().split('\n')
        i = 0
        skip_test_mod_depth = None
        depth = 0
        pending_cfg_test = False
        stack = []  # (name, start, depth_at_open)
        for n, raw in enumerate(lines):
            line = strip(raw)
            if re.match(r'\s*#\[cfg\(test\)\]', line):
                pending_cfg_test = True
            m = FN.match(line)
            allowed = False
            if m:
                k = n - 1  # the comment may sit above the fn's attributes and doc comment
                while k >= 0 and lines[k].strip().startswith(('#[', '///', '//')):
                    allowed = allowed or 'tidy: long function' in lines[k]
                    k -= 1
            if m and skip_test_mod_depth is None and not allowed:
                stack.append([m.group(7), n, depth, False])
            if pending_cfg_test and re.match(r'\s*(pub\s+)?mod\s+\w+\s*\{', line):
                skip_test_mod_depth = depth
                pending_cfg_test = False
            elif pending_cfg_test and line.strip() and not line.strip().startswith('#'):
                pending_cfg_test = False
            for ch in line:
                if ch == '{':
                    depth += 1
                    for s in stack:
                        pass
                elif ch == '}':
                    depth -= 1
                    if skip_test_mod_depth is not None and depth == skip_test_mod_depth:
                        skip_test_mod_depth = None
                    if stack and depth == stack[-1][2]:
                        name, start, d, _ = stack.pop()
                        length = n - start + 1
                        if length > LIMIT:
                            out.append((length, p, start + 1, name))
            # fn declarations without body (trait) end with ;
            if stack and line.rstrip().endswith(';') and depth == stack[-1][2]:
                stack.pop()
for l, p, s, name in sorted(out, reverse=True):
    print(f"{l:5} {p}:{s} {name}")
print(f"{len(out)} function(s) over {LIMIT} lines")
sys.exit(1 if out else 0)
