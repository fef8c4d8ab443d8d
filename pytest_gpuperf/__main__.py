"""``python -m pytest_gpuperf``: the ``gpuperf`` command line (see :mod:`pytest_gpuperf.reporting.cli`)."""

from pytest_gpuperf.reporting.cli import main

raise SystemExit(main())
