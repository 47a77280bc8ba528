#!/usr/bin/env python3
"""Checks that every library includes only itself and the libraries below it.

The allowed edges are the ones src/CMakeLists.txt links; this test catches an
include that crosses them (the linker would not: a header-only use links fine).
Usage: check_layering.py SOURCE_DIR. Prints one line per violation; exit 1 if any.
"""
import pathlib
import re
import sys

# library -> libraries it may include (besides itself); mirrors src/CMakeLists.txt.
ALLOWED = {
    "common": set(),
    "ops": {"common"},
    "quant": {"ops", "common"},
    "target": {"quant", "ops", "common"},
    "program": {"ops", "target", "common"},
    "gguf": {"common"},
    "text": {"gguf", "common"},
    "dsl": {"ops", "common"},
    "ir": {"dsl", "ops", "common"},
    "passes": {"ir", "dsl", "ops", "program", "target", "common"},
    "codegen": {"program", "target", "quant", "ops", "common"},
    "driver": {"codegen", "passes", "ir", "dsl", "program", "target", "common"},
    "runtime": {"program", "ops", "quant", "target", "text", "gguf", "common"},
    "grammar": {"text", "gguf", "common"},
    "server": {"runtime", "grammar", "text", "gguf", "common"},
}
COMPILER = {"dsl", "ir", "passes", "codegen", "driver"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"lumen/([a-z_]+)/')


def library_of(path: pathlib.Path, root: pathlib.Path):
    rel = path.relative_to(root).parts
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    if rel[:2] == ("include", "lumen") and len(rel) > 3:
        return rel[2]
    return None


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    files = [p for d in ("src", "include/lumen") for p in (root / d).rglob("*") if p.suffix in (".h", ".cpp")]
    for path in sorted(files):
        lib = library_of(path, root)
        if lib is None:
            problems.append(f"{path.relative_to(root)}: not inside a library folder")
            continue
        if lib not in ALLOWED:
            problems.append(f"{path.relative_to(root)}: library '{lib}' is not in the layering table")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            dep = m.group(1)
            if dep != lib and dep not in ALLOWED[lib]:
                problems.append(f"{path.relative_to(root)}:{number}: '{lib}' may not include lumen/{dep}/")
    # The rule the table encodes, stated once more so that editing the table cannot drop it.
    for lib in COMPILER:
        if "runtime" in ALLOWED[lib]:
            problems.append(f"layering table: compiler library '{lib}' may not depend on the runtime")
    for lib in ("runtime", "grammar", "text", "gguf", "target", "program"):
        if ALLOWED[lib] & COMPILER:
            problems.append(f"layering table: '{lib}' may not depend on a compiler library")
    for p in problems:
        print(p)
    print(f"check_layering: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
