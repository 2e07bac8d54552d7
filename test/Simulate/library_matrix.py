#!/usr/bin/env python3
"""Simulates every library program on a matrix of topologies and shapes with mk-sim.

Each (program, topology, shape) is compiled to the scheduled level and run for several launches
(at the compiled split, every role but the first at one CTA, the first at one CTA: the splits a
kernel may take at launch) and interleavings. What the passes refuse is fine (mk-sim exits 2: mkc refuses it too); what they
accept must simulate with no finding. The shapes are small (the simulator computes every element
and orders every access) and include dims that are not tile multiples, tiny ones, shards that
are not tile multiples, uneven and empty shards.

    library_matrix.py --mk-sim build/bin/mk-sim --lib lib [--seeds 6] [--jobs 2]
"""

import argparse
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

TOPOLOGIES = ["1x1", "1x2", "2x1", "2x2", "1x4", "2x4", "3x1", "4x2"]


def shapes(program, w):
    """Three or more shapes of `program` on W ranks: NAME=VALUE bindings."""
    # The last shapes of the GEMMs split unevenly (torch.tensor_split's), into shards that are
    # not tile multiples or are empty, with rows that are not 16-byte multiples and a local K
    # that is not a multiple of 16.
    if program in ("gemm_allreduce",):
        return [f"M=300,N=256,K={32 * w}", f"M=7,N=136,K={16 * w}", f"M=256,N=384,K={64 * w}",
                "M=100,N=300,K=100"]
    if program == "gemm_reducescatter":
        return [f"M={128 * w},N=136,K={32 * w}", f"M={256 * w},N=72,K={16 * w}",
                f"M=1000,N=256,K={32 * w}", "M=130,N=300,K=100", "M=1,N=72,K=40"]
    if program == "allgather_gemm":
        return [f"M={128 * w},N={128 * w},K=64", f"M={256 * w},N={128 * w},K=48",
                f"M=7,N={128 * w},K=32", "M=300,N=700,K=40", "M=1,N=100,K=24"]
    if program == "allreduce":
        return ["M=300,N=136", "M=7,N=256", "M=384,N=128"]
    if program.startswith("ring_attention_gqa"):
        return [f"B=1,H=4,Hkv=2,S={128 * w},D=64", f"B=2,H=2,Hkv=1,S={128 * w},D=64",
                "B=1,H=2,Hkv=2,S=1000,D=64"]
    if program == "ring_attention_zigzag":
        # Chunks of whole tiles only: S = 1000 is refused.
        return [f"B=1,H=2,S={256 * w},D=64", f"B=2,H=1,S={256 * w},D=128", "B=1,H=1,S=1000,D=64"]
    if program.startswith("ring_attention"):
        return [f"B=1,H=2,S={128 * w},D=64", f"B=2,H=1,S={128 * w},D=64",
                f"B=1,H=1,S={128 * w},D=128", "B=1,H=1,S=1000,D=64"]
    if program == "moe_dispatch_gemm_combine":
        # Capacities of 128 rows drop tokens where more are routed to an expert; 7 tokens a rank
        # with the default capacity (T).
        return [f"T={128 * w},Hd=256,I=128,E={w},TopK=1,C=128",
                f"T={128 * w},Hd=256,I=128,E={2 * w},TopK=2,C=128",
                f"T={256 * w},Hd=256,I=256,E={2 * w},TopK=2,C=256",
                f"T={7 * w},Hd=256,I=128,E={2 * w},TopK=2"]
    raise ValueError(f"no shapes for {program}")


def run(mk_sim, path, topology, shape, seeds):
    start = time.monotonic()
    # --vary-split: the three launches split the grid into the roles three ways, as the runtime's
    # SM controller may between launches of one kernel.
    command = [mk_sim, str(path), f"--topology={topology}", f"--shape={shape}",
               f"--seeds={seeds}", "--vary-split"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start, command


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mk-sim", required=True)
    parser.add_argument("--lib", required=True, type=pathlib.Path)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    programs = sorted(p.stem for p in args.lib.glob("*.mlir"))
    cases = [(p, t, s) for p in programs for t in TOPOLOGIES
             for s in shapes(p, eval(t.replace("x", "*")))]
    counts = {"clean": 0, "refused": 0, "failed": 0}
    failures = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run, args.mk_sim, args.lib / f"{p}.mlir", t, s, args.seeds):
                   (p, t, s) for p, t, s in cases}
        for future in concurrent.futures.as_completed(futures):
            program, topology, shape = futures[future]
            rc, output, seconds, command = future.result()
            outcome = {0: "clean", 2: "refused"}.get(rc, "failed")
            counts[outcome] += 1
            first = next((line for line in output.splitlines() if line.strip()), "")
            print(f"{outcome:8} {program:26} {topology:4} {shape:40} {seconds:6.1f} s  {first[:160]}",
                  flush=True)
            if outcome == "failed":
                failures.append((" ".join(command), output))
    print(f"\n{len(cases)} cases: {counts['clean']} simulated clean, {counts['refused']} refused "
          f"by the passes, {counts['failed']} with findings or errors")
    for command, output in failures:
        print(f"\n$ {command}\n{output}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
