#!/usr/bin/env python3
"""Feeds a tool mutated copies of .mlir files and checks that it never crashes or hangs.

Each mutation (truncation, a deleted, duplicated or swapped token, a changed number, dtype or
keyword) must be answered with exit status 0 (the mutant is still valid) or 1 with a located
`FILE:LINE:COL: error:` diagnostic. A signal, another status, a timeout or an unlocated error fails.
"""

import argparse
import pathlib
import random
import re
import subprocess
import sys
import tempfile

TOKEN = re.compile(r"%[\w#]+|@\w+|!mk\.\w+|[A-Za-z_][\w.]*|-?\d+(?:\.\d+)?|\S")
REPLACEMENTS = ["0", "-1", "7", "9223372036854775807", "bf16", "f32", "i32", "index", "world",
                "gpus", "shard", "replicated", "symmetric", ":", "[", "]", "(", ")", "{", "}",
                "<", ">", ",", "mk.matmul", "mk.load", "over", "tiles", "?", "%undefined"]


def mutate(text: str, rng: random.Random) -> str:
    tokens = [m for m in TOKEN.finditer(text)]
    kind = rng.randrange(6)
    if kind == 0:  # truncate
        return text[: rng.randrange(len(text))]
    t = rng.choice(tokens)
    if kind == 1:  # delete a token
        return text[: t.start()] + text[t.end():]
    if kind == 2:  # duplicate a token
        return text[: t.end()] + " " + t.group() + text[t.end():]
    if kind == 3:  # replace a token
        return text[: t.start()] + rng.choice(REPLACEMENTS) + text[t.end():]
    if kind == 4:  # swap two tokens
        a, b = sorted(rng.sample(tokens, 2), key=lambda m: m.start())
        return (text[: a.start()] + b.group() + text[a.end(): b.start()] + a.group()
                + text[b.end():])
    # replace a token with another token of the same file
    return text[: t.start()] + rng.choice(tokens).group() + text[t.end():]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutations", type=int, default=200, help="per input file")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--tool-arg", action="append", default=[])
    parser.add_argument("inputs", nargs="+", type=pathlib.Path)
    args = parser.parse_args()

    files = [p for d in args.inputs for p in (sorted(d.glob("*.mlir")) if d.is_dir() else [d])]
    rng = random.Random(args.seed)
    failures = 0
    runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for source in files:
            text = source.read_text()
            for i in range(args.mutations):
                mutant = pathlib.Path(tmp) / f"{source.stem}.{i}.mlir"
                mutant.write_text(mutate(text, rng))
                runs += 1
                try:
                    run = subprocess.run([args.tool, str(mutant), *args.tool_arg],
                                         capture_output=True, text=True, timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"HANG after {args.timeout} s: {mutant}")
                    failures += 1
                    continue
                located = re.search(re.escape(str(mutant)) + r":\d+:\d+: error: ", run.stderr)
                if run.returncode == 0 or (run.returncode == 1 and located):
                    mutant.unlink()
                    continue
                failures += 1
                print(f"FAIL (exit {run.returncode}) on {mutant}:\n{run.stderr[-2000:]}")
    print(f"{runs} mutants of {len(files)} files, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
