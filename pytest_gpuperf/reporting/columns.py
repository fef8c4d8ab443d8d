"""The summary table's column and sort keys (``--gpuperf-columns``, ``--gpuperf-sort``), stated
once: the table (:mod:`pytest_gpuperf.reporting.report`) draws them, the plugin checks the options
and words their help from them. No imports, so the plugin reads them at start-up for nothing."""

from __future__ import annotations

#: The default table's column keys, in order (``name`` always first, ``verdict`` always last).
DEFAULT_COLUMNS: tuple[str, ...] = ("name", "device", "median", "cpu", "p95", "iqr", "rounds", "baseline", "ratio",
                                    "peak-mem", "ops-kern", "syncs", "flops", "bytes", "bottleneck", "verdict")
#: Columns shown only when asked for (``items``: with the ``items_per_call`` option; ``instr``: with
#: ``--gpuperf-instructions``).
EXTRA_COLUMN_KEYS: tuple[str, ...] = ("items", "instr", "min", "max", "mean", "stddev", "outliers", "ops", "iterations")
#: Every key ``--gpuperf-columns`` accepts.
TABLE_COLUMNS: tuple[str, ...] = DEFAULT_COLUMNS + EXTRA_COLUMN_KEYS
#: The order of each group's rows without ``--gpuperf-sort``.
DEFAULT_SORT = "name"
#: Keys of ``--gpuperf-sort`` (ascending).
SORT_KEYS: tuple[str, ...] = (DEFAULT_SORT, "median", "mean", "min", "max", "stddev", "p95", "iqr", "rounds", "ratio")
