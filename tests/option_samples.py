"""A sample value of every benchmark option for each of its sources (shared by the option
precedence tests: tests/unit/test_option_precedence.py and tests/test_plugin.py)."""

from __future__ import annotations

#: option -> (ini value as written in an ini file, its value; command-line value or None when the
#: option has no flag, its value; marker value, its value). Each source's value differs from
#: the value of the source below it.
SAMPLES: dict[str, tuple[tuple[str, object], tuple[object, object] | None, tuple[object, object]]] = {
    "group": (("g-ini", "g-ini"), None, ("g-marker", "g-marker")),
    "warmup_time": (("0.5", 0.5), None, (0.25, 0.25)),
    "min_rounds": (("20", 20), None, (30, 30)),
    "max_rounds": (("5000", 5000), None, (6000, 6000)),
    "max_time": (("2", 2.0), ("3", 3.0), (4, 4.0)),
    "target_precision": (("0.01", 0.01), None, (0.02, 0.02)),
    "threshold": (("0.1", 0.1), ("0.2", 0.2), (0.3, 0.3)),
    "alpha": (("0.05", 0.05), ("0.02", 0.02), (0.03, 0.03)),
    "flush_l2": (("true", True), None, ("no", False)),
    "cuda_graph": (("yes", True), None, (False, False)),
    "device": (("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1")),
    "memory_threshold": (("0.1", 0.1), None, (0.2, 0.2)),
    "max_memory": (("1 KiB", 1024), None, ("2 kB", 2000)),
    "expect_bottleneck": (("memory", ("memory",)), None, (("compute", "overhead"), ("compute", "overhead"))),
    "history": (("5", 5), None, (7, 7)),
    "confirm": (("2", 2), ("3", 3), (0, 0)),
    "counts": (("false", False), None, (True, True)),
    "count_tolerance": (("0.1", 0.1), None, (0.2, 0.2)),
    "max_ops": (("10", 10), None, (20, 20)),
    "max_kernels": (("11", 11), None, (21, 21)),
    "max_syncs": (("12", 12), None, (0, 0)),
    "max_recompiles": (("13", 13), None, (1, 1)),
    "items_per_call": (("64", 64.0), None, (128, 128.0)),
    "items": (("samples", "samples"), None, ("tokens", "tokens")),
    "processes": (("2", 2), None, (1, 1)),
    "scaling": (("weak", "weak"), None, ("strong", "strong")),
    "min_scaling_efficiency": (("0.5", 0.5), None, (0.8, 0.8)),
    "collective": (("all_gather", "all_gather"), None, ("all_reduce", "all_reduce")),
    "bytes_per_call": (("1 KiB", 1024), None, (4096, 4096)),
    "instructions": (("true", True), None, (False, False)),
    "steady_clock": (("20", 20.0), None, (5, 5.0)),
}
