"""The ``gpuperf`` command (and ``python -m pytest_gpuperf``): ``compare`` and ``show`` from
:mod:`pytest_gpuperf.cli.reports`, plus ``bisect`` from :mod:`pytest_gpuperf.cli.bisect`, ``history`` from
:mod:`pytest_gpuperf.cli.history`, ``changes`` from :mod:`pytest_gpuperf.cli.changes`, ``merge`` (of CI shards)
from :mod:`pytest_gpuperf.cli.merge`, ``dashboard`` from :mod:`pytest_gpuperf.cli.dashboard` and ``scaling``
(scaling efficiency across world sizes) from :mod:`pytest_gpuperf.cli.scaling`.

The command-line applications live in this package, the top layer beside the pytest plugin
(``docs/architecture.md``): they read reports and baselines, and ``bisect`` runs A/B measurements;
``reporting`` below them only displays."""

from __future__ import annotations

from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpuperf`` command line with ``argv`` (default ``sys.argv[1:]``); its exit code (see
    :func:`pytest_gpuperf.cli.reports.main` and :func:`pytest_gpuperf.cli.bisect.cmd_bisect`)."""
    import functools
    import sys

    from pytest_gpuperf.cli import changes, dashboard, history, merge, scaling
    from pytest_gpuperf.cli.bisect import register, split_pytest_args
    from pytest_gpuperf.cli.reports import main as cli_main

    own, pytest_args = split_pytest_args(sys.argv[1:] if argv is None else argv)
    return cli_main(own, extra=(functools.partial(register, pytest_args=pytest_args), history.register,
                                changes.register, merge.register, dashboard.register,
                                scaling.register))
