"""``python -m pytest_gpuperf``: the ``gpuperf`` command line (see :mod:`pytest_gpuperf.command`)."""

from pytest_gpuperf.command import main

raise SystemExit(main())
