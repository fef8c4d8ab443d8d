"""A bounded CPU-burning "noisy neighbour" for stress-testing the test suite under contention.

Usage (stdlib only, Python >= 3.10)::

    python benchmarks/noisy_neighbour.py --seconds 600 [--cores 1] [--duty 1.0]
    python benchmarks/noisy_neighbour.py [--cores 1] [--duty 1.0] [--seconds 1800] [--repeat 3] -- CMD ARGS...

Standalone mode burns ``--cores`` cores (one separate process each, a busy loop of pure-Python
integer arithmetic) for at most ``--seconds`` seconds and then exits by itself; it prints one line
when it starts and one when it stops. ``--duty D`` (0 < D <= 1) burns only the first D of every
100 ms period and sleeps the rest, so ``--duty 0.5`` is roughly half a core per burner.

Wrapper mode (a command after ``--``) starts the burners, runs the command ``--repeat`` times in a
row (default 1; stdout/stderr inherited) while they run, then stops them, also on Ctrl-C, SIGTERM
or an exception. It prints ``run i/N: exit <rc>, <seconds> s`` per run and a final line
``neighbour: N runs, M passed (exit 0), K failed``; the exit status is 0 only if every run exited 0.

Safety: every burner has its own hard deadline (``--seconds``, default 1800 s in wrapper mode), reads
stdin from /dev/null, ignores SIGINT (the parent stops it), and exits within one 100 ms period once
its parent process has gone (its parent pid changed), so it cannot outlive a crashed parent.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

PERIOD_S = 0.1  # length of one duty-cycle period, in seconds
WRAPPER_DEFAULT_S = 1800.0  # hard bound of the burners in wrapper mode, in seconds


def burn(seconds: float, duty: float, parent_pid: int) -> None:
    """Burn one core until ``seconds`` (wall-clock seconds) have passed or the parent has gone.

    ``duty`` is the busy fraction (0, 1] of each ``PERIOD_S`` (0.1 s) period; the rest is slept.
    ``parent_pid`` is the pid whose disappearance (``os.getppid()`` changing) ends the loop.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # never read (or hold) the terminal's stdin
    os.close(devnull)
    deadline = time.monotonic() + seconds
    x = 1
    while (start := time.monotonic()) < deadline and os.getppid() == parent_pid:
        busy_until = min(start + duty * PERIOD_S, deadline)
        while time.monotonic() < busy_until:
            for _ in range(2000):  # ~0.1 ms of pure-Python arithmetic between clock reads
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        rest = start + PERIOD_S - time.monotonic()
        if rest > 0 and duty < 1.0:
            time.sleep(min(rest, max(0.0, deadline - time.monotonic())))


def start_burners(cores: int, seconds: float, duty: float) -> list[mp.Process]:
    """Start ``cores`` burner processes, each bounded to ``seconds`` (s) at busy fraction ``duty``."""
    procs = [mp.Process(target=burn, args=(seconds, duty, os.getpid()), name=f"neighbour-{i}", daemon=True)
             for i in range(cores)]
    for p in procs:
        p.start()
    return procs


def stop_burners(procs: list[mp.Process], timeout: float = 5.0) -> None:
    """Terminate (SIGTERM) and join the burners; kill any still alive after ``timeout`` seconds."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()


def run_repeated(cmd: list[str], repeat: int) -> int:
    """Run ``cmd`` ``repeat`` times in a row, printing exit code and wall time (s); return #failures."""
    failed = 0
    for i in range(1, repeat + 1):
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(cmd).returncode
        except OSError as exc:  # e.g. command not found
            print(f"neighbour: cannot run {cmd[0]!r}: {exc}", file=sys.stderr, flush=True)
            rc = 127
        failed += rc != 0
        print(f"run {i}/{repeat}: exit {rc}, {time.perf_counter() - t0:.2f} s", flush=True)
    print(f"neighbour: {repeat} runs, {repeat - failed} passed (exit 0), {failed} failed", flush=True)
    return failed


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse options before ``--``; everything after the first ``--`` is the command (``.command``)."""
    cmd: list[str] = []
    had_sep = "--" in argv
    if had_sep:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 usage="%(prog)s [--seconds S] [--cores N] [--duty D] [--repeat R] [-- CMD ARGS...]")
    ap.add_argument("--seconds", type=float, help="hard bound of the burners in seconds "
                    f"(required standalone; default {WRAPPER_DEFAULT_S:.0f} with a command)")
    ap.add_argument("--cores", type=int, default=1, help="burner processes, one core each (default 1)")
    ap.add_argument("--duty", type=float, default=1.0, help="busy fraction of each 100 ms period, 0 < D <= 1 (default 1)")
    ap.add_argument("--repeat", type=int, help="run the command after -- this many times (default 1)")
    args = ap.parse_args(argv)
    args.command = cmd
    if args.seconds is None and not cmd:
        ap.error("--seconds is required when no command is given after --")
    if args.seconds is not None and not args.seconds > 0:
        ap.error(f"--seconds must be > 0, got {args.seconds:g}")
    if args.cores < 1:
        ap.error(f"--cores must be >= 1, got {args.cores}")
    if not 0 < args.duty <= 1:
        ap.error(f"--duty must be in (0, 1], got {args.duty:g}")
    if args.repeat is not None and args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.repeat is not None and not cmd:
        ap.error("--repeat needs a command after --, e.g. --repeat 3 -- pytest tests")
    if had_sep and not cmd:
        ap.error("no command after --")
    return args


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    seconds = args.seconds if args.seconds is not None else WRAPPER_DEFAULT_S
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below on SIGTERM too
    t0 = time.perf_counter()
    procs = start_burners(args.cores, seconds, args.duty)
    try:
        if args.command:
            print(f"neighbour: burning {args.cores} core(s) at duty {args.duty:g} (bound {seconds:g} s)",
                  file=sys.stderr, flush=True)
            return 1 if run_repeated(args.command, args.repeat or 1) else 0
        print(f"neighbour: burning {args.cores} core(s) at duty {args.duty:g} for at most {seconds:g} s", flush=True)
        for p in procs:
            p.join()
        print(f"neighbour: done after {time.perf_counter() - t0:.1f} s", flush=True)
        return 0
    except KeyboardInterrupt:
        print("neighbour: interrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        stop_burners(procs)


if __name__ == "__main__":
    sys.exit(main())
