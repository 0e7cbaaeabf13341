"""The ``kforge`` command: one module per command family, thin over the library.

* :mod:`~kforge.cli.main`: the parser, ``asm``/``disasm``/``run``, and :func:`main`;
* :mod:`~kforge.cli.options`: what every subcommand shares (the one-line error,
  argument types, machine options, reading programs and input);
* :mod:`~kforge.cli.link`, :mod:`~kforge.cli.proofs`, :mod:`~kforge.cli.registry`,
  :mod:`~kforge.cli.sandbox`, :mod:`~kforge.cli.server`, :mod:`~kforge.cli.cache`:
  the command families.

Every error is one line on stderr and exit status 2.  Every module here imports
only what building the parser needs; a command imports the rest when it runs
(``tests/test_cli_startup.py`` keeps it so).
"""

from kforge.cli.main import main, result_json
from kforge.cli.options import CliError, load_program

__all__ = ["CliError", "load_program", "main", "result_json"]
