"""The ``gpuperf`` command (and ``python -m pytest_gpuperf``): ``compare`` and ``show`` from
:mod:`pytest_gpuperf.reporting.cli`, plus ``bisect`` from :mod:`pytest_gpuperf.bisect.cli`, which sits in a
higher layer (it runs A/B measurements) and so is added here, above both."""

from __future__ import annotations

from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpuperf`` command line with ``argv`` (default ``sys.argv[1:]``); its exit code (see
    :func:`pytest_gpuperf.reporting.cli.main` and :func:`pytest_gpuperf.bisect.cli.cmd_bisect`)."""
    import functools
    import sys

    from pytest_gpuperf.bisect.cli import register, split_pytest_args
    from pytest_gpuperf.reporting.cli import main as cli_main

    own, pytest_args = split_pytest_args(sys.argv[1:] if argv is None else argv)
    return cli_main(own, extra=(functools.partial(register, pytest_args=pytest_args),))
