"""``python -m kforge.cli``: the same as the ``kforge`` command."""

from kforge.cli.main import main

raise SystemExit(main())
