"""``python -m pytest_gpuperf``: the ``gpuperf`` command line (see :mod:`pytest_gpuperf.cli`)."""

from .cli import main

raise SystemExit(main())
