#!/usr/bin/env python3
"""Runs mkc-launch on small rank programs and checks what it promises (no GPU needed).

`check_mkc_launch.py --launcher PATH --source mkc-launch.cpp CASE` runs one group of checks (see
CASES); each is a ctest entry. The ranks are this script too: `check_mkc_launch.py rank ACTION...`
makes rank r run ACTION[r] (the last one for higher ranks); see act().
"""

import argparse
import fcntl
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

# Variables an enclosing launcher may leave, which mkc-launch must not pass on to its ranks.
FOREIGN = {"RANK": "7", "WORLD_SIZE": "9", "LOCAL_RANK": "1", "SLURM_PROCID": "3",
           "OMPI_COMM_WORLD_RANK": "1", "MKC_NODE_ID": "1", "MKC_GPUS_PER_NODE": "3",
           "MKC_RANK": "5"}
LONG_LINE = 100_000  # longer than mkc-launch's 64 KiB line limit
MAX_LINE = 64 * 1024
# Longer than any check takes on a busy machine, far shorter than the 60 s a hung rank sleeps.
HANG = 20
FLOOD = 50_000  # lines, about 600 KB: more than one read of mkc-launch takes


# --- The ranks -------------------------------------------------------------------------------

def record_pid(name, pid):
    pathlib.Path(os.environ["CHECK_MKC_LAUNCH_DIR"], f"{name}.{os.environ['MKC_RANK']}").write_text(
        str(pid))


def wait_for(name):
    """Until another rank has recorded a pid: a slow start must not change what is checked."""
    path = pathlib.Path(os.environ["CHECK_MKC_LAUNCH_DIR"], name)
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def act(action):
    kind, *args = action.split(":")
    rank = int(os.environ["MKC_RANK"])
    if kind == "env":
        names = [n for n in os.environ if n.startswith("MKC_") or n in FOREIGN]
        print(json.dumps({n: os.environ[n] for n in names}), flush=True)
    elif kind == "exit":  # exit:STATUS[:DELAY] or exit:STATUS:after=PIDFILE
        if args[1:] and args[1].startswith("after="):
            wait_for(args[1].removeprefix("after="))
        else:
            time.sleep(float(args[1]) if len(args) > 1 else 0)
        sys.exit(int(args[0]))
    elif kind == "sleep":  # sleep:SECONDS
        record_pid("rank", os.getpid())
        time.sleep(float(args[0]))
    elif kind == "abort":
        os.abort()
    elif kind == "lines":  # lines:COUNT, each written in two pieces, to catch mixed lines
        for i in range(int(args[0])):
            for stream in (sys.stdout, sys.stderr):
                name = "out" if stream is sys.stdout else "err"
                stream.write(f"{name} {rank} {i} "), stream.flush()
                time.sleep(0.001)
                stream.write("x" * (i % 7) + "\n"), stream.flush()
        if rank == 0:
            print("y" * LONG_LINE, flush=True)
        sys.stdout.write(f"partial {rank}")
    elif kind == "flood":  # fills a large pipe with lines and exits 3 at once
        fcntl.fcntl(sys.stdout.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        os.write(sys.stdout.fileno(), b"".join(b"flood %d\n" % i for i in range(FLOOD)))
        os._exit(3)
    elif kind == "grandchild":  # leaves a process behind, holding stdout; waits for it with :wait
        child = subprocess.Popen(["sleep", "60"])
        record_pid("grandchild", child.pid)
        print("started", flush=True)
        if args == ["wait"]:
            child.wait()
    elif kind == "trap":  # says which signal it got, then exits 0
        def report(number, _frame):
            print(f"got {signal.Signals(number).name}", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGINT, report)
        signal.signal(signal.SIGTERM, report)
        print("ready", flush=True)
        time.sleep(60)
    else:
        sys.exit(f"unknown action {action}")


def rank_main(actions):
    act(actions[min(int(os.environ["MKC_RANK"]), len(actions) - 1)])


# --- Helpers ---------------------------------------------------------------------------------

class Failure(Exception):
    pass


def check(condition, message, result=None):
    if not condition:
        detail = ""
        if result is not None:
            detail = (f"\n  exit status {result.returncode} after {result.elapsed:.2f} s"
                      f"\n  stdout: {result.stdout[-2000:]!r}\n  stderr: {result.stderr[-2000:]!r}")
        raise Failure(message + detail)


class Launch:
    def __init__(self, launcher, source, workdir):
        self.launcher = launcher
        self.source = source  # mkc-launch.cpp, for the usage errors it can print
        self.workdir = workdir
        self.stderrs = []  # every launch's stderr, for the check that usage errors are tested

    def environment(self, extra):
        env = {n: v for n, v in os.environ.items() if not n.startswith("MKC_") and n not in FOREIGN}
        env["CHECK_MKC_LAUNCH_DIR"] = str(self.workdir)
        env.update(extra or {})
        return env

    def command(self, options, actions):
        program = [sys.executable, __file__, "rank", *actions] if actions is not None else []
        return [self.launcher, *options, *(["--"] if program else []), *program]

    def run(self, options, actions=None, env=None, timeout=2 * HANG):
        start = time.monotonic()
        try:
            result = subprocess.run(self.command(options, actions), env=self.environment(env),
                                    capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"mkc-launch {' '.join(options)} did not end within {timeout} s")
        result.elapsed = time.monotonic() - start
        self.stderrs.append(result.stderr)
        return result

    def start(self, options, actions, ignored=()):
        return subprocess.Popen(self.command(options, actions), env=self.environment(None),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: [signal.signal(n, signal.SIG_IGN)
                                                    for n in ignored])

    def pid(self, name, rank):
        return int((self.workdir / f"{name}.{rank}").read_text())


def alive(pid):
    """A zombie is dead: its parent (init, for an orphan) may not have reaped it yet."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def check_dead(pid, what):
    deadline = time.monotonic() + 2
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not alive(pid), f"{what} (pid {pid}) still runs after mkc-launch exited")


def rank_environments(result, ranks):
    check(result.returncode == 0, "the env ranks failed", result)
    envs = {}
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"\[rank (\d+)\] (\{.*\})", line)
        check(match, f"unexpected output line {line!r}", result)
        envs[int(match[1])] = json.loads(match[2])
    check(sorted(envs) == list(range(ranks)), f"expected ranks 0-{ranks - 1}", result)
    return envs


# --- The checks ------------------------------------------------------------------------------

def check_env(launch):
    # Other MKC_ variables (settings, not the launch) reach the ranks.
    setting = {"MKC_BOOTSTRAP_TIMEOUT": "7"}
    envs = rank_environments(launch.run(["-n", "4"], ["env"], env={**FOREIGN, **setting}), 4)
    tokens = {env["MKC_JOB_TOKEN"] for env in envs.values()}
    ports = {env["MKC_MASTER_PORT"] for env in envs.values()}
    check(len(tokens) == 1 and re.fullmatch(r"[0-9a-f]{32}", next(iter(tokens))),
          f"ranks should share one random token: {tokens}")
    check(len(ports) == 1 and 1 <= int(next(iter(ports))) <= 65535, f"bad ports {ports}")
    for rank, env in envs.items():
        expected = {"MKC_RANK": str(rank), "MKC_WORLD_SIZE": "4", "MKC_LOCAL_RANK": str(rank),
                    "MKC_LOCAL_WORLD_SIZE": "4", "MKC_MASTER_ADDR": "127.0.0.1",
                    "MKC_MASTER_PORT": next(iter(ports)), "MKC_JOB_TOKEN": next(iter(tokens)),
                    "MKC_DEVICE": str(rank), **setting}
        check(env == expected, f"rank {rank}: environment {env}, expected {expected}")

    again = rank_environments(launch.run(["-n", "1"], ["env"]), 1)
    check(again[0]["MKC_JOB_TOKEN"] not in tokens, "two launches got the same job token")

    envs = rank_environments(launch.run(["-n", "4", "--gpus-per-node", "2", "--master-port=12345"],
                                        ["env"], env={"MKC_JOB_TOKEN": "preset"}), 4)
    for rank, env in envs.items():
        expected = {"MKC_RANK": str(rank), "MKC_WORLD_SIZE": "4", "MKC_LOCAL_RANK": str(rank % 2),
                    "MKC_LOCAL_WORLD_SIZE": "2", "MKC_GPUS_PER_NODE": "2",
                    "MKC_MASTER_ADDR": "127.0.0.1", "MKC_MASTER_PORT": "12345",
                    "MKC_JOB_TOKEN": "preset", "MKC_DEVICE": str(rank)}
        check(env == expected, f"rank {rank} (--gpus-per-node 2): {env}, expected {expected}")

    # A program found through PATH, without "--".
    result = launch.run(["-n2", "sh", "-c", "echo $MKC_RANK/$MKC_WORLD_SIZE"])
    check(sorted(result.stdout.splitlines()) == ["[rank 0] 0/2", "[rank 1] 1/2"],
          "sh from PATH without --", result)


def check_prefix(launch):
    count = 50
    result = launch.run(["-n", "3"], [f"lines:{count}"])
    check(result.returncode == 0, "the ranks failed", result)
    for name, text in (("out", result.stdout), ("err", result.stderr)):
        seen = {rank: [] for rank in range(3)}
        for line in text.splitlines():
            if name == "out" and (match := re.fullmatch(r"\[rank 0\] (y+)", line)):
                seen[0].append(len(match[1]))
                continue
            if name == "out" and (match := re.fullmatch(r"\[rank (\d)\] partial \1", line)):
                seen[int(match[1])].append("partial")
                continue
            match = re.fullmatch(rf"\[rank (\d)\] {name} \1 (\d+) (x*)", line)
            check(match and len(match[3]) == int(match[2]) % 7, f"mixed or unprefixed line "
                  f"{line!r} in std{name}", result)
            seen[int(match[1])].append(int(match[2]))
        for rank, lines in seen.items():
            expected = list(range(count))
            if name == "out":
                expected += [MAX_LINE, LONG_LINE - MAX_LINE] if rank == 0 else []
                expected.append("partial")
            check(lines == expected, f"rank {rank}'s std{name} lines: {lines}", result)

    # What a rank wrote before it exited is all forwarded.
    result = launch.run(["-n", "1"], ["flood"])
    check(result.returncode == 3 and result.stdout.splitlines() ==
          [f"[rank 0] flood {i}" for i in range(FLOOD)], "the output of a rank that exited", result)

    result = launch.run(["--no-prefix", "-n", "2", "sh", "-c",
                         "echo out $MKC_RANK; echo err $MKC_RANK >&2; printf partial"])
    # Without the launcher between them, a partial line runs into the next rank's output.
    check(result.returncode == 0 and result.stdout.count("partial") == 2
          and sorted(result.stdout.replace("partial", "").splitlines()) == ["out 0", "out 1"]
          and sorted(result.stderr.splitlines()) == ["err 0", "err 1"],
          "--no-prefix: the ranks write to the launcher's streams", result)


def check_exit_status(launch):
    result = launch.run(["-n", "2", "--grace", "1"], ["sleep:60", "exit:3:after=rank.0"])
    check(result.returncode == 3 and result.elapsed < HANG,
          "a rank's status 3, long before the sleeper ends", result)
    check("mkc-launch: rank 1 exited with status 3\n" in result.stderr, "the failure", result)
    check("mkc-launch: rank 0 still running 1 s after rank 1 failed; sending SIGTERM"
          in result.stderr, "the grace period", result)
    check_dead(launch.pid("rank", 0), "the sleeping rank")

    result = launch.run(["-n", "3"], ["exit:0:0.5", "abort", "exit:0:0.5"])
    check(result.returncode == 128 + signal.SIGABRT, "128 + SIGABRT", result)
    check("mkc-launch: rank 1 was killed by signal SIGABRT\n" in result.stderr
          and "SIGTERM" not in result.stderr,
          "ranks exiting on their own within the grace period are not signalled", result)

    result = launch.run(["-n", "3"], ["exit:0"])
    check(result.returncode == 0 and result.stderr == "", "all ranks exit 0", result)


def check_skipped(launch):
    result = launch.run(["-n", "3"], ["exit:77"])
    check(result.returncode == 77, "every rank exited 77", result)
    result = launch.run(["-n", "2"], ["exit:77", "exit:3:0.3"])
    check(result.returncode == 3, "a failure comes before an earlier skip", result)
    check("rank 0 exited with status 77 (skipped)" in result.stderr, "the skip", result)


def check_timeout(launch):
    # Shell ranks: they start in a millisecond, long before the timeout even on a busy machine.
    hang = 'echo $$ >"$CHECK_MKC_LAUNCH_DIR/rank.$MKC_RANK"; exec sleep 60'
    result = launch.run(["-n", "3", "--timeout", "1", "sh", "-c",
                         f'if [ "$MKC_RANK" = 0 ]; then exit 0; fi; {hang}'])
    check(result.returncode == 124 and result.elapsed < HANG, "--timeout: status 124", result)
    check("mkc-launch: timeout after 1 s: ranks 1-2 still running; sending SIGTERM\n"
          in result.stderr, "the message names the running ranks only", result)
    check_dead(launch.pid("rank", 1), "a hung rank")

    result = launch.run(["-n", "1", "--timeout", "0.5", "--grace", "0.5", "sh", "-c",
                         f"trap '' TERM; {hang}"])
    check(result.returncode == 124 and result.elapsed < HANG, "a rank ignoring SIGTERM", result)
    check("rank 0 still running 0.5 s after SIGTERM; sending SIGKILL" in result.stderr,
          "SIGKILL after the grace period", result)
    check_dead(launch.pid("rank", 0), "a rank ignoring SIGTERM")


def check_signals(launch):
    def start_ranks(ignored=()):
        process = launch.start(["-n", "2"], ["trap"], ignored)
        ready = [process.stdout.readline() for _ in range(2)]
        check(sorted(ready) == ["[rank 0] ready\n", "[rank 1] ready\n"], f"ready lines {ready}")
        return process

    for number in (signal.SIGINT, signal.SIGTERM):
        process = start_ranks()
        process.send_signal(number)
        stdout, stderr = process.communicate(timeout=HANG)
        name = signal.Signals(number).name
        check(process.returncode == 128 + number and sorted(stdout.splitlines()) ==
              [f"[rank 0] got {name}", f"[rank 1] got {name}"] and
              f"mkc-launch: got {name}: forwarding it to ranks 0-1" in stderr,
              f"{name} forwarded: status {process.returncode}, {stdout!r}, {stderr!r}")

    # As under nohup: an ignored SIGHUP stays ignored (the ranks would die of it).
    process = start_ranks(ignored=[signal.SIGHUP])
    process.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=HANG)
    check(process.returncode == 128 + signal.SIGTERM and sorted(stdout.splitlines()) ==
          ["[rank 0] got SIGTERM", "[rank 1] got SIGTERM"] and "SIGHUP" not in stderr,
          f"ignored SIGHUP: status {process.returncode}, {stdout!r}, {stderr!r}")


def check_process_groups(launch):
    # A process left behind would hold the output pipe: mkc-launch kills it and ends.
    result = launch.run(["-n", "2"], ["grandchild"])
    check(result.returncode == 0 and result.elapsed < HANG, "a rank leaving a process behind",
          result)
    for rank in range(2):
        check_dead(launch.pid("grandchild", rank), f"rank {rank}'s leftover process")

    result = launch.run(["-n", "2", "--grace", "0.5"],
                        ["grandchild:wait", "exit:1:after=grandchild.0"])
    check(result.returncode == 1 and result.elapsed < HANG, "a failure stops what ranks started",
          result)
    check_dead(launch.pid("grandchild", 0), "what a stopped rank started")


def check_usage(launch):
    script = launch.workdir / "script"
    script.write_text("#!/bin/sh\n")
    marker = launch.workdir / "started"
    program = ["touch", str(marker)]
    errors = [
        ([], "-n/--nproc, the number of ranks, is required"),
        (["-n", "2"], "no program to run"),
        (["-n", "0", *program], "-n expects a number of ranks (at least 1), not '0'"),
        (["--nproc=x", *program], "--nproc expects a number of ranks (at least 1), not 'x'"),
        (["-n", "4", "--gpus-per-node", "3", *program],
         "--gpus-per-node=3 does not divide --nproc=4"),
        (["-n", "4", "--gpus-per-node", "0", *program],
         "--gpus-per-node expects a number of ranks per node (at least 1), not '0'"),
        (["-n", "1", "--master-port", "65536", *program],
         "--master-port expects a TCP port (1-65535), not '65536'"),
        (["-n", "1", "--timeout", "0", *program],
         "--timeout expects a number of seconds above 0, not '0'"),
        (["-n", "1", "--grace", "-1", *program],
         "--grace expects a number of seconds (0 or more), not '-1'"),
        (["-n", "1", "--frobnicate", *program], "unknown option '--frobnicate'"),
        (["-n", "1", "--timeout"], "--timeout needs a value"),
        (["-n", "1", "no-such-program-mkc"], "program 'no-such-program-mkc' not found in PATH"),
        (["-n", "1", "./no/such/file"],
         "program './no/such/file' cannot be found: No such file or directory"),
        (["-n", "1", str(script)], f"program '{script}' is not an executable file"),
        (["-n", "1", str(launch.workdir)], f"program '{launch.workdir}' is not an executable file"),
    ]
    for options, message in errors:
        result = launch.run(options)
        check(result.returncode == 2 and f"mkc-launch: error: {message}" in result.stderr
              and not marker.exists(), f"mkc-launch {' '.join(options)}: {message!r}", result)

    result = launch.run(["--help"])
    check(result.returncode == 0 and result.stdout.startswith("Usage: mkc-launch"), "--help",
          result)

    # Every usage error the launcher can print was seen above.
    text = pathlib.Path(launch.source).read_text()
    formats = re.findall(r'usageError\(\s*"((?:[^"\\]|\\.)*)"', text)
    check(formats, f"no usageError calls found in {launch.source}")
    for message in formats:
        pattern = ".*".join(re.escape(part) for part in re.split(r"\{[^}]*\}", message))
        check(any(re.search(pattern, stderr) for stderr in launch.stderrs),
              f"untested usage error in {launch.source}: {message!r}")


CASES = {"env": check_env, "prefix": check_prefix, "exit-status": check_exit_status,
         "skipped": check_skipped, "timeout": check_timeout, "signals": check_signals,
         "process-groups": check_process_groups, "usage": check_usage}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return rank_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--launcher", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("case", choices=CASES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        launch = Launch(args.launcher, args.source, pathlib.Path(workdir))
        try:
            CASES[args.case](launch)
        except Failure as failure:
            print(f"FAIL: {failure}")
            return 1
    print(f"{args.case}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
