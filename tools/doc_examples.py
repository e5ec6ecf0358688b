#!/usr/bin/env python3
"""Re-runs the `$ gpucomm sim ...` and `$ gpucomm algo ...` examples (their
output depends on nothing but the command) of a Markdown file and lists the
lines of their printed output that a fresh run no longer prints.

    python3 tools/doc_examples.py docs/sim.md [path/to/gpucomm]

An example is a fenced block line starting with `$ gpucomm sim` or `$
gpucomm algo`, followed
by the output the docs show, up to the next example or the end of the
block. Examples with `--timing` are skipped (their wall times vary), and
so are lines giving wall times (`(wall ...)`, `... s wall`). Exits 1 when
some example's output moved, so the docs' figures can be checked after a
model change (build the binary first: `cargo build --release -p
gpucomm-cli`).
"""

import re
import subprocess
import sys

WALL = re.compile(r"^\(wall |\bs wall\b")


def examples(lines):
    fenced, cur = False, None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            if not fenced and cur:
                yield cur
                cur = None
            continue
        if fenced and line.startswith(("$ gpucomm sim", "$ gpucomm algo")):
            if cur:
                yield cur
            cur = (i + 1, line[2:], [])
        elif fenced and cur is not None:
            cur[2].append(line)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    binary = sys.argv[2] if len(sys.argv) > 2 else "./target/release/gpucomm"
    lines = open(path, encoding="utf-8").read().split("\n")
    moved = 0
    for lineno, cmd, shown in examples(lines):
        if "--timing" in cmd:
            continue
        args = cmd.split()[1:]
        run = subprocess.run([binary] + args, capture_output=True, text=True)
        fresh = (run.stdout + run.stderr).split("\n")
        printed = {x.rstrip() for x in fresh}
        missing = [
            s for s in shown if s.strip() and s.rstrip() not in printed and not WALL.search(s)
        ]
        if missing:
            moved += 1
            print(f"== {path}:{lineno}: {cmd}")
            for s in missing[:12]:
                print("  docs: ", s)
            print("  fresh:")
            for s in fresh[:40]:
                print("    ", s)
    print(f"# {moved} example(s) moved", file=sys.stderr)
    sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
