#!/usr/bin/env python3
"""Generates random tile programs (programs.py) and checks that mkc refuses each with a located
message or compiles it, and that what it compiles simulates cleanly (mk-sim, its launches at
several splits of the grid into the roles): the CI half of the
random-program differential test. A sample also goes through NVRTC to an sm_90a cubin.

    check_programs.py --mkc build/bin/mkc --mk-sim build/bin/mk-sim --first-seed 0 --count 500

Prints one line per program and the seeds of any failure; `programs.draw(seed, TOPOLOGIES)`
gives the program again.
"""

import argparse
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import programs  # noqa: E402

TOPOLOGIES = ["1x1", "1x2", "2x1", "2x2", "1x4", "3x1"]
# A refusal names where: FILE:LINE:COL: error: ..., or mkc's own flag error.
LOCATED = re.compile(r"^\S+:\d+:\d+: error: .+|^mkc: error: .+", re.M)


def check(seed, mkc, mk_sim, directory, cubin):
    spec = programs.draw(seed, TOPOLOGIES)
    path = directory / f"random_{seed}.mlir"
    path.write_text(spec.text())
    flags = [f"--topology={spec.topology}", f"--shape={spec.shape_bindings()}"]
    compiled = subprocess.run([mkc, str(path), *flags, "--emit=cuda", "-o", os.devnull],
                              capture_output=True, text=True, timeout=600)
    what = f"{spec.family} on {spec.topology} {spec.shape_bindings()} tile {spec.tile}"
    if compiled.returncode != 0:
        if compiled.returncode == 1 and LOCATED.search(compiled.stderr):
            return "refused", what, LOCATED.search(compiled.stderr).group(0)
        return "failed", what, f"mkc exited {compiled.returncode}:\n{compiled.stderr}"
    # Its three launches at three splits of the grid, as the SM controller may launch it.
    simulated = subprocess.run([mk_sim, str(path), *flags, "--seeds=2", "--vary-split"],
                               capture_output=True, text=True, timeout=1800)
    if simulated.returncode != 0:
        return "failed", what, f"mk-sim exited {simulated.returncode}:\n" + \
            simulated.stdout + simulated.stderr
    if cubin:
        binary = directory / f"random_{seed}.cubin"
        built = subprocess.run([mkc, str(path), *flags, "-o", str(binary)], capture_output=True,
                               text=True, timeout=900)
        if built.returncode != 0:
            return "failed", what, f"NVRTC:\n{built.stderr}"
        return "cubin", what, ""
    return "simulated", what, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mkc", required=True)
    parser.add_argument("--mk-sim", required=True)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--cubin-every", type=int, default=25,
                        help="compile every Nth accepted-looking program to a cubin")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    seeds = range(args.first_seed, args.first_seed + args.count)
    counts = {"simulated": 0, "cubin": 0, "refused": 0, "failed": 0}
    failures = []
    with tempfile.TemporaryDirectory(prefix="mkc-random-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        directory = pathlib.Path(tmp)
        futures = {pool.submit(check, seed, args.mkc, args.mk_sim, directory,
                               (seed - args.first_seed) % args.cubin_every == 0): seed
                   for seed in seeds}
        for future in concurrent.futures.as_completed(futures):
            seed = futures[future]
            outcome, what, detail = future.result()
            counts[outcome] += 1
            print(f"{outcome:9} seed {seed:5} {what}"
                  + (f"  {detail.splitlines()[0][:140]}" if outcome == "refused" else ""),
                  flush=True)
            if outcome == "failed":
                failures.append((seed, what, detail))
    print(f"\nseeds {args.first_seed}-{args.first_seed + args.count - 1}: "
          f"{counts['simulated'] + counts['cubin']} compiled and simulated clean "
          f"({counts['cubin']} also to sm_90a cubins), {counts['refused']} refused with a "
          f"located message, {counts['failed']} failed")
    for seed, what, detail in failures:
        print(f"\nseed {seed}: {what}\n{detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
