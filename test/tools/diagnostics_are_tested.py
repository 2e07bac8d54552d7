#!/usr/bin/env python3
"""Checks that every diagnostic the sources can emit is expected by some test.

A diagnostic is the first string literal streamed into `emitOpError()`, `emitError(...)` or
`parser.emitError(...)`; its text up to the first streamed value must appear in a test file.
Messages that start with "internal error:" report broken invariants of the compiler itself, which
no input can reach.
"""

import argparse
import pathlib
import re
import sys

EMIT = re.compile(r'emit(?:Op)?Error\([^;]*?\)\s*<<\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', re.S)
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sources", nargs="+", type=pathlib.Path, required=True)
    parser.add_argument("--tests", nargs="+", type=pathlib.Path, required=True)
    args = parser.parse_args()

    def files(roots, suffixes):
        return [f for r in roots for f in (r.rglob("*") if r.is_dir() else [r])
                if f.suffix in suffixes]

    tests = "\n".join(f.read_text() for f in files(args.tests, {".mlir", ".cpp", ".py"}))
    missing = []
    count = 0
    for source in files(args.sources, {".cpp"}):
        text = source.read_text()
        for match in EMIT.finditer(text):
            message = "".join(LITERAL.findall(match.group(1))).replace('\\"', '"').strip()
            if len(message) < 8 or message.startswith("internal error:"):
                continue  # a fragment such as "' " cannot be looked for
            count += 1
            if message not in tests:
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f"{source}:{line}: untested diagnostic: {message!r}")
    print("\n".join(missing))
    print(f"{count} diagnostics, {len(missing)} without a test")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
