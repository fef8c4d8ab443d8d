"""``python -m pytest_gpuperf``: the ``gpuperf`` command line (see :mod:`pytest_gpuperf.cli`)."""

from pytest_gpuperf.cli import main

raise SystemExit(main())
