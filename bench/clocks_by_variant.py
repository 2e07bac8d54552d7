#!/usr/bin/env python3
"""The GPUs' SM clock and power while each benchmark variant ran.

    nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw --format=csv,noheader,nounits \\
        -lms 50 > clocks.csv &
    python3 bench/gemm_allreduce.py --trace trace.csv ...
    python3 bench/clocks_by_variant.py trace.csv clocks.csv

For each variant of the trace (its idle, warm-up and timed runs), the mean SM clock (MHz) and
power (W) of each GPU over the second half of its window, where the clocks have settled.
"""

import csv
import datetime
import statistics
import sys


def samples(path):
    """(unix seconds, GPU index, SM MHz, W) for each line of an nvidia-smi log."""
    for stamp, index, clock, power in csv.reader(open(path), skipinitialspace=True):
        when = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
        yield when, int(index), float(clock), float(power)


def main(trace_path, log_path):
    log = list(samples(log_path))
    gpus = sorted({gpu for _, gpu, _, _ in log})
    print(f"{'variant':<28}" + "".join(f"{f'GPU {g} MHz':>11}{f'GPU {g} W':>9}" for g in gpus))
    for row in csv.DictReader(open(trace_path)):
        start, end = float(row["start_unix_s"]), float(row["end_unix_s"])
        settled = (start + end) / 2
        line = f"{row['variant']:<28}"
        for g in gpus:
            window = [(clock, power) for when, gpu, clock, power in log
                      if gpu == g and settled <= when <= end]
            if not window:
                line += f"{'-':>11}{'-':>9}"
                continue
            line += (f"{statistics.mean(c for c, _ in window):>11.0f}"
                     f"{statistics.mean(p for _, p in window):>9.0f}")
        print(line)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
