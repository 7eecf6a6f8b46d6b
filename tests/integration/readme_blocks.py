#!/usr/bin/env python3
"""Writes the command blocks of README sections as shell scripts.

readme_blocks.py README.md OUTDIR SECTION...

A command block is a run of lines indented by four spaces after a blank
line, inside a "## SECTION" (its "###" subsections included, up to the
next "## " heading).  Blocks of program output (their first line starts
with "{" or "pstrain[") are left out.  Each block goes to
OUTDIR/NN-<section>.sh; its path, a tab and its first line are printed,
one block a line, in README order.
"""

import pathlib
import re
import sys


def sections(lines, names):
    """Yields (section, line) for the lines of the named ## sections."""
    current = None
    for line in lines:
        if line.startswith("## "):
            current = line[3:].strip() if line[3:].strip() in names else None
            continue
        if current:
            yield current, line


def blocks(lines, names):
    block, where, previous = [], None, ""
    for section, line in sections(lines, names):
        if line.startswith("    ") and (block or previous.strip() == ""):
            block.append(line[4:])
            where = section
        elif block:
            yield where, block
            block = []
        previous = line
    if block:
        yield where, block


def is_output(block):
    return block[0].startswith("{") or block[0].startswith("pstrain[")


def main(readme, outdir, *names):
    lines = pathlib.Path(readme).read_text().splitlines()
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    found = set()
    n = 0
    for section, block in blocks(lines, set(names)):
        found.add(section)
        if is_output(block):
            continue
        n += 1
        slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")
        path = out / f"{n:02d}-{slug}.sh"
        path.write_text("\n".join(block) + "\n")
        print(f"{path}\t{block[0]}")
    missing = set(names) - found
    if missing:
        sys.exit(f"readme_blocks.py: no section {', '.join(sorted(missing))} in {readme}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
