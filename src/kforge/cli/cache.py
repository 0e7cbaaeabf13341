"""``kforge cache info|clear``: the fast tier's compiled-module cache on disk.

The cache lives in ``DIR/fast-modules`` (``clear`` also removes the compiled Starlark
runtime kept in ``DIR/starlark-runtime``) (``--data-dir``, else ``$KFORGE_DATA_DIR``,
else ``~/.local/share/kforge``) and is bounded: least recently used modules go
once it passes its size cap (``$KFORGE_MODULE_CACHE_MAX_BYTES``, default 256 MiB).
Clearing it is always safe: a module missing from it is compiled again.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kforge.cli.options import CliError, add_data_dir_option, show_help

__all__ = ["add_commands", "command_clear", "command_info", "format_size"]


def format_size(size: int) -> str:
    """``size`` bytes for people: ``512 bytes``, ``1.5 KiB``, ``256.0 MiB``."""
    if size < 1024:
        return f"{size} bytes"
    value = size / 1024
    units = ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value /= 1024
        units.pop(0)
    return f"{value:.1f} {units[0]}"


def _cache(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from kforge.core import default_data_dir
    from kforge.fast.cache import ModuleCache, configured_max_bytes

    try:
        max_bytes = configured_max_bytes()
    except ValueError as error:
        raise CliError(f"cache: {error}") from None
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    return ModuleCache(data_dir, max_bytes=max_bytes)


def command_info(args: argparse.Namespace) -> int:
    """``kforge cache info``: where the cache is, what it holds, its cap."""
    from kforge.fast.cache import MAX_BYTES_ENVIRONMENT

    usage = _cache(args).usage()
    if args.json:
        print(
            json.dumps(
                {
                    "directory": str(usage.directory),
                    "modules": usage.modules,
                    "bytes": usage.total_bytes,
                    "max_bytes": usage.max_bytes,
                }
            )
        )
        return 0
    print(f"compiled-module cache: {usage.directory}")
    print(
        f"  {usage.modules} module{'' if usage.modules == 1 else 's'}, "
        f"{format_size(usage.total_bytes)} of at most {format_size(usage.max_bytes)} "
        f"(least recently used go first; ${MAX_BYTES_ENVIRONMENT} sets the cap)"
    )
    return 0


def command_clear(args: argparse.Namespace) -> int:
    """``kforge cache clear``: remove every compiled module, and the compiled Starlark
    runtime (``DIR/starlark-runtime``)."""
    from kforge.starlark.prepared import clear as clear_starlark_runtime

    cache = _cache(args)
    removed = cache.clear()
    print(f"removed {removed} file{'' if removed == 1 else 's'} from {cache.directory}")
    runtimes = clear_starlark_runtime(cache.directory.parent)
    print(f"removed {runtimes} compiled Starlark runtime{'' if runtimes == 1 else 's'}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Add ``cache info`` and ``cache clear``."""
    cache = subparsers.add_parser("cache", help="the compiled-module cache: its size, clearing it")
    cache.set_defaults(handler=lambda args: show_help(cache))
    actions = cache.add_subparsers(dest="cache_action", metavar="ACTION")
    info = actions.add_parser("info", help="where the cache is, how big, its cap")
    info.add_argument("--json", action="store_true", help="print JSON")
    clear = actions.add_parser(
        "clear", help="remove every compiled module and the compiled Starlark runtime"
    )
    for parser, handler in ((info, command_info), (clear, command_clear)):
        add_data_dir_option(parser, "the cache lives")
        parser.set_defaults(handler=handler)
