"""The plugin's command-line flags, declared once: their shape, help, and whether a worker gets them.

Every ``--gpuperf-*`` flag is a :class:`Flag` of :data:`PLUGIN_FLAGS` (the plugin's
``pytest_addoption`` declares them from it, in this order; ``--gpuperf-simulated-cuda`` is
declared by the simulated device's plugin, ``pytest_gpuperf.testing``), and every
``--benchmark-*`` flag of the pytest-benchmark compatibility is one of :data:`BENCHMARK_FLAGS`
(their help is worded beside what they do, in ``plugin/benchmark_compat.py``).
``worker=True``: a worker process (replicates, the A/B sides, bisect steps) gets the flag as the
user wrote it (:func:`pytest_gpuperf.ab.run.worker_args`); the others stay with the coordinator
(reports, A/B and bisect, the process limits) or are the hidden role flags the coordinator adds
itself (``--gpuperf-role``, ``--gpuperf-select``, ``--gpuperf-op-profile``).

Help texts may name defaults owned elsewhere as ``str.format`` fields (``{max_processes}``...),
filled in by the declaring plugin (:meth:`Flag.kwargs`). Pure: stdlib only.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.core.options import DEFAULT_PROCESSES, OPTION_HELP


@dataclass(frozen=True)
class Flag:
    """One flag: ``metavar`` None is a switch (``store_true``); ``nargs``/``const`` as argparse's;
    ``help`` None hides it; ``worker``: a worker process gets it (see the module doc)."""

    name: str
    worker: bool
    metavar: str | None = None
    help: str | None = ""
    nargs: str | None = None
    const: Any = None

    @property
    def arity(self) -> int | str | None:
        """argparse's ``nargs`` of the flag's action: 0 for a switch, None for one value, or ``"?"``/``"+"``."""
        return 0 if self.metavar is None else self.nargs

    def kwargs(self, **fields: Any) -> dict[str, Any]:
        """``addoption``'s keywords (``help`` formatted with ``fields`` and escaped for argparse's ``%``)."""
        kw: dict[str, Any] = {"action": "store_true", "default": False} if self.metavar is None else {
            "metavar": self.metavar, "default": None}
        if self.nargs is not None:
            kw.update(nargs=self.nargs, const=self.const)
        kw["help"] = argparse.SUPPRESS if self.help is None else self.help.format(**fields).replace("%", "%%")
        return kw


def _opt(name: str) -> str:
    return OPTION_HELP[name].replace("{", "{{").replace("}", "}}")


#: Every ``--gpuperf-*`` flag, in ``--help``'s order.
PLUGIN_FLAGS: tuple[Flag, ...] = (
    # what is measured and compared, where its files go, and how strict the gate is
    Flag("--gpuperf", False, help="measure gpu_bench tests and compare them with the stored baselines"),
    Flag("--gpuperf-update-baselines", False,
         help="measure and write baselines for the tests that pass (implies --gpuperf)"),
    Flag("--gpuperf-baseline-dir", True, "DIR",
         "folder of baseline files (ini gpuperf_baseline_dir; default: baselines/ under the rootdir)"),
    Flag("--gpuperf-device", True, "DEVICE", _opt("device")),
    Flag("--gpuperf-json", False, "PATH", "write this run's results (baseline schema plus verdicts) to PATH"),
    Flag("--gpuperf-memory-snapshot", False, "DIR",
         "CUDA: when a memory check fails, save an allocation-history snapshot (PyTorch memory visualizer "
         "pickle) under DIR"),
    Flag("--gpuperf-classify", True,
         help="classify every measured benchmark's bottleneck (compute/memory/overhead/sync/transfer/data)"),
    Flag("--gpuperf-artifacts", False, "DIR",
         "where chrome traces of regressed or misclassified benchmarks go (default .gpuperf/artifacts/)"),
    Flag("--gpuperf-confirm", True, "N", _opt("confirm")),
    Flag("--gpuperf-no-host-load", True,
         help="CPU backend: do not measure other processes' CPU load while benchmarks run (the busy-host guard; "
              "also ini gpuperf_host_load = false or GPUPERF_HOST_LOAD=0)"),
    Flag("--gpuperf-strict", True, help="fail inconclusive comparisons too (default: they pass with a warning)"),
    Flag("--gpuperf-normalize", True,
         help="divide current times by the machine-speed drift of the reference workloads before deciding"),
    Flag("--gpuperf-markdown", False, "PATH",
         "write a Markdown summary (for a CI step summary or a PR comment) to PATH"),
    Flag("--gpuperf-plot", False, "DIR",
         "write PNG plots (per benchmark and a suite forest plot) under DIR; needs pytest-gpuperf[plot]"),
    Flag("--gpuperf-threshold", True, "FRACTION", _opt("threshold")),
    Flag("--gpuperf-alpha", True, "P", _opt("alpha")),
    Flag("--gpuperf-max-time", True, "SECONDS", _opt("max_time")),
    Flag("--gpuperf-instructions", True,
         help="also count every benchmark's host instructions per call under valgrind's callgrind (one valgrind "
              "worker process after the timed ones) and gate them against the baseline's (ini "
              "gpuperf_instructions = true; marker option instructions=True)"),
    Flag("--gpuperf-no-counts", True,
         help="do not count ops/kernels/syncs/copies/FLOPs/bytes per call, so no count gate (same as ini "
              "gpuperf_counts = false)"),
    # the worker processes a session measures in (and the hidden flags the coordinator passes them)
    Flag("--gpuperf-processes", False, "N",
         "measure every benchmark in N fresh worker processes, one after another, and decide on the spread "
         f"between them (ini gpuperf_processes, env GPUPERF_PROCESSES; default {DEFAULT_PROCESSES}; 1: in this "
         "process only, which cannot see run-to-run spread)"),
    Flag("--gpuperf-nproc", False, "N",
         "measure under torchrun: each worker process is a whole torchrun launch of N ranks on this node "
         "(python -m torch.distributed.run --standalone --nproc-per-node N -m pytest ...), --gpuperf-processes of "
         "them per benchmark, and the baselines are those of world size N (ini gpuperf_nproc; 1: off)"),
    Flag("--gpuperf-max-processes", False, "N",
         "measure a benchmark whose comparison is inconclusive (or, updating, whose baseline is too imprecise) in "
         "more worker processes, two at a time, up to N in all (ini gpuperf_max_processes; default "
         "{max_processes}; at most --gpuperf-processes: off)"),
    Flag("--gpuperf-more-processes-time", False, "SECONDS",
         "the worker processes added for inconclusive benchmarks may take this many seconds in all; none is started "
         "that the time left cannot turn into a decision (ini gpuperf_more_processes_time; default: as long as the "
         "first --gpuperf-processes took)"),
    Flag("--gpuperf-settle-time", False, "SECONDS",
         "the A/B against the baselines' commit that settles inconclusive comparisons may take about this many "
         "seconds: past that share of its time, its first pair of worker processes starts no other inconclusive "
         "benchmark, whose stored verdict then stands; regressions are always confirmed (ini gpuperf_settle_time; "
         "default: no limit)"),
    Flag("--gpuperf-worker-timeout", False, "SECONDS",
         "stop a worker process still running after this many seconds; the benchmarks it had not reported fail "
         "with its output (ini gpuperf_worker_timeout; default {worker_timeout_s:g})"),
    Flag("--gpuperf-rank-timeout", False, "SECONDS",
         "under torchrun: how long a rank waits for the others where they may still be in their own setup (the "
         "session's collectives, the first of each benchmark), and the timeout of the process group the plugin "
         "creates; a benchmark's later collectives wait at most min(this, max(30, 4 x (warmup_time + max_time))) "
         "(ini gpuperf_rank_timeout; default {rank_timeout_s:g})"),
    Flag("--gpuperf-select", False, "FILE", None),  # a worker's node ids (added by the coordinator)
    Flag("--gpuperf-role", False, "JSON", None),  # a replicate worker's role (added by the coordinator)
    Flag("--gpuperf-op-profile", False, "N", None, nargs="?", const="1"),  # an extras process that profiles the ops too, one of N
    Flag("--gpuperf-no-ab-confirm", False,
         help="do not confirm a stored-baseline regression by A/B against the baseline's own git commit on this "
              "machine (ini gpuperf_ab_confirm = false)"),
    Flag("--gpuperf-no-why", False,
         help="do not profile the ops of a verdict that moves (both sides of an A/B decision, a bisect culprit's "
              "step, or against the baseline's stored op profile) for its per-op diff ('why: ...'), nor store an "
              "op profile with the baselines (ini gpuperf_why = false)"),
    Flag("--gpuperf-why-max", False, "N",
         "profile the ops (the why) of at most N verdicts that moved in a run (A/B, then against stored op "
         "profiles), the largest changes first; the others say they were not profiled (ini gpuperf_why_max; "
         "default {why_max}; 0: none)"),
    Flag("--gpuperf-no-seed", True,
         help="do not seed the global random generators (random, NumPy's, torch's) before each benchmark from its "
              "test id where the plugin measures; by default every benchmark's random inputs are the same in every "
              "process, whatever ran before it (ini gpuperf_seed = false)"),
    # A/B against a git revision on this machine, and bisection
    Flag("--gpuperf-ab", False, "REF",
         "A/B: measure the benchmarks of the working tree (B) and of git revision REF (A, e.g. origin/main) on "
         "this machine, interleaved, and decide on the paired evidence (no stored baseline needed)"),
    Flag("--gpuperf-ab-processes", False, "N",
         "A/B: pairs of worker processes (one A, one B each), run one pair after another, in --gpuperf-ab and in "
         "the A/B confirmation of a stored regression (default 2; blocks of one process share its speed mode)"),
    Flag("--gpuperf-ab-pythonpath", False, "PATHS",
         "A/B: import roots of the code under test, relative to the repository's top (e.g. src), put first on "
         "each side's PYTHONPATH (ini gpuperf_ab_pythonpath)"),
    Flag("--gpuperf-bisect", False, "GOOD..BAD",
         "instead of running the tests, find the first commit between GOOD and BAD (git revisions) where the "
         "selected benchmarks got slower, by A/B steps (as `gpuperf bisect GOOD BAD -- <args>`)"),
    Flag("--gpuperf-bisect-on-regression", False, "N",
         "after a regression confirmed by A/B against the baselines' commit, bisect from that commit to HEAD for "
         "at most N regressed benchmarks in the same run (ini gpuperf_bisect_on_regression; default 0: off)"),
    Flag("--gpuperf-bisect-timeout", False, "SECONDS",
         "bisection: start no step after this many seconds (ini gpuperf_bisect_timeout; default "
         "{bisect_timeout_s:g})"),
    # the performance history (plugin/history.py, storage/history.py)
    Flag("--gpuperf-history", False, "URL",
         "append each measuring run to this history store: sqlite:///PATH or a bare path (SQLite), or "
         "postgresql://USER@HOST/DB for a store CI jobs share (ini gpuperf_history_url; default "
         ".gpuperf/history.sqlite under the rootdir)"),
    Flag("--gpuperf-no-history", False, help="do not record this run in the history store (ini gpuperf_history_url = off)"),
    # selecting benchmark tests and shaping the summary table (plugin/benchmark_compat.py)
    Flag("--gpuperf-only", True,
         help="run only benchmark tests (gpu_bench or benchmark fixture, or gpu_bench marker); skip the rest"),
    Flag("--gpuperf-skip", True, help="skip benchmark tests (gpu_bench or benchmark fixture, or gpu_bench marker)"),
    Flag("--gpuperf-columns", False, "LIST",
         "comma-separated columns of the summary table, from: {columns} (name comes first and verdict last in "
         "any case)"),
    Flag("--gpuperf-sort", False, "KEY", "sort each group of the summary table by: {sort_keys} (default {default_sort})"),
)

#: The simulated CUDA device's flag (declared by ``pytest_gpuperf.testing``, a plugin loaded with ``-p``):
#: the workers get it, so they measure on the same simulated device.
SIMULATED_CUDA = Flag("--gpuperf-simulated-cuda", True, "N",
                      "install N simulated CUDA devices (1-64) for the session, in place of torch.cuda, NVML and "
                      "the profiler's device events (pytest_gpuperf.testing; ini gpuperf_simulated_cuda)")

#: pytest-benchmark's flags, as the compatibility serves them: the ones that select or shape a
#: measurement go to the workers; reports, summary tables, saving and the ignored ones do not.
BENCHMARK_FLAGS: tuple[Flag, ...] = (
    Flag("--benchmark-skip", True),
    Flag("--benchmark-only", True),
    Flag("--benchmark-disable", True),
    Flag("--benchmark-enable", True),
    Flag("--benchmark-json", False, "PATH"),
    Flag("--benchmark-group-by", False, "LABEL"),
    Flag("--benchmark-sort", False, "COL"),
    Flag("--benchmark-columns", False, "LABELS"),
    Flag("--benchmark-min-rounds", True, "NUM"),
    Flag("--benchmark-max-time", True, "SECONDS"),
    Flag("--benchmark-warmup", True, "KIND", nargs="?", const="on"),
    # accepted and ignored
    Flag("--benchmark-min-time", False, "SECONDS"),
    Flag("--benchmark-timer", False, "FUNC"),
    Flag("--benchmark-disable-gc", False),
    Flag("--benchmark-calibration-precision", False, "NUM"),
    Flag("--benchmark-warmup-iterations", False, "NUM"),
    Flag("--benchmark-compare", False, "NUM|_ID", nargs="?", const=True),
    Flag("--benchmark-compare-fail", False, "EXPR", nargs="+"),
    Flag("--benchmark-save", False, "NAME"),
    Flag("--benchmark-autosave", False),
)

#: Every flag above by name.
ALL_FLAGS: dict[str, Flag] = {f.name: f for f in (*PLUGIN_FLAGS, SIMULATED_CUDA, *BENCHMARK_FLAGS)}
