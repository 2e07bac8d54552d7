#!/usr/bin/env python3
"""Ranks that run at once on one GPU, each on its share of the SMs, under the CUDA MPS daemon
(issue 28's testbed for the SM split).

Starts its own daemon (nvidia-cuda-mps-control -d, as root) in a temporary CUDA_MPS_PIPE_DIRECTORY,
so that no other process's clients join it; then, with every client at
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (MKC_TEST_MPS_PERCENT, 50 unless set):
  1. one rank compiles lib/gemm_allreduce.mlir and checks that its persistent grid fits the SMs its
     context has (cuCtxGetExecAffinity's count, which the runtime compiles for): a grid of every
     SM would wait forever for CTAs that never start;
  2. gpu_gemm_allreduce.py's checks (1x2: GEMM+AllReduce in place, with roles, from a graph), its
     two ranks on the GPU at once, each with its share; or, given `-- COMMAND...`, that command
     (another test of ranks sharing the GPU: `gpu_mps.py -- python3 gpu_any_shape.py`).
Then it stops the daemon, and prints the daemon's logs if anything failed. Each part has a
deadline (MKC_TEST_MPS_TIMEOUT seconds, 240 unless set); a part past it is killed and fails.
Exits 77 (skipped) where there is no daemon to start or no GPU, or the daemon does not start (it
needs root).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77

PROBE = """
import os, sys, mkc
runtime = mkc.Runtime()
op = runtime.compile(mkc.library_program("gemm_allreduce"), M=1000, N=1024, K=512)
grid = sum(ctas for _, ctas in op.roles)
print(f"grid {grid} CTAs: {op.roles}")
limit = int(sys.argv[1])
sys.exit(0 if grid <= limit else 1)
"""


def run(command, env, timeout, what):
    """`command` in its own process group, its output passed through as it comes, killed whole
    past `timeout`: whether it succeeded."""
    sys.stdout.flush()
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return process.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        print(f"{what}: not finished after {timeout} s (killed)", flush=True)
        return False


def main():
    control = shutil.which("nvidia-cuda-mps-control")
    if not control or not shutil.which("nvidia-smi"):
        print("SKIP: no nvidia-cuda-mps-control or no nvidia-smi (no GPU driver)")
        return SKIP
    sms = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True)
    if sms.returncode != 0:
        print(f"SKIP: nvidia-smi finds no GPU: {sms.stdout.strip()} {sms.stderr.strip()}")
        return SKIP
    percent = int(os.environ.get("MKC_TEST_MPS_PERCENT", "50"))
    timeout = int(os.environ.get("MKC_TEST_MPS_TIMEOUT", "240"))
    pipes, logs = tempfile.mkdtemp(prefix="mkc-mps-pipe-"), tempfile.mkdtemp(prefix="mkc-mps-log-")
    python = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
    # A wait that never ends gives up (naming its flag) well before the deadline.
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipes, CUDA_MPS_LOG_DIRECTORY=logs,
               MKC_WAIT_TIMEOUT=os.environ.get("MKC_WAIT_TIMEOUT", "20"),
               PYTHONPATH=os.pathsep.join(filter(None, [python, os.environ.get("PYTHONPATH")])))
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        print(f"SKIP: nvidia-cuda-mps-control -d failed ({started.returncode}): "
              f"{started.stdout.strip()} {started.stderr.strip()}")
        return SKIP
    failed = False
    try:
        clients = dict(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(percent))
        # The SMs a client at `percent` gets: the driver rounds the share up to whole SMs (66 of
        # an H200's 132 at 50%); the grid may not be more.
        count = subprocess.run([sys.executable, "-c",
                                "import torch; print(torch.cuda.get_device_properties(0)"
                                ".multi_processor_count)"], env=env, capture_output=True,
                               text=True)
        device_sms = int(count.stdout.strip() or 0)
        limit = -(-device_sms * percent // 100) if device_sms else 1 << 30
        ok = run([sys.executable, "-c", PROBE, str(limit)], clients, timeout, "the grid probe")
        print(f"{'PASS' if ok else 'FAIL'}: at {percent}% of {device_sms} SMs the grid fits "
              f"{limit} SMs", flush=True)
        failed |= not ok
        if ok:
            # Its ranks on the one GPU (MKC_SHARE_GPU), there at once.
            command = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else \
                [sys.executable, os.path.join(HERE, "gpu_gemm_allreduce.py")]
            ok = run(command, dict(clients, MKC_TEST_SHARED_GPU="1"), timeout, " ".join(command))
            print(f"{'PASS' if ok else 'FAIL'}: {' '.join(command)}, ranks at once under MPS at "
                  f"{percent}%")
            failed |= not ok
    finally:
        try:
            stopped = subprocess.run([control], input="quit\n", env=env, capture_output=True,
                                     text=True, timeout=30)
            why = "" if stopped.returncode == 0 else f"{stopped.stdout} {stopped.stderr}".strip()
        except subprocess.TimeoutExpired:
            why = "'quit' not done after 30 s (a client still holds the server)"
        if why:
            failed = True
            print(f"FAIL: stopping the MPS daemon: {why}")
        if failed:
            for name in sorted(os.listdir(logs)):
                with open(os.path.join(logs, name), errors="replace") as log:
                    print(f"--- {name} (last lines)\n" + "".join(log.readlines()[-15:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
