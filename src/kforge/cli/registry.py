"""The ``kforge registry`` commands: keygen, propose, verify, promote, revoke, show, log, check, export.

``kforge.cli`` wires them in with :func:`add_commands`; each handler takes the
parsed ``argparse.Namespace`` and returns the exit status: 0 on success, 1 when
verification fails or the ledger does not check out; errors raise ``CliError``
or a ``ForgeError`` (exit 2).  Every command takes ``--data-dir`` (default
``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``) and ``--policy`` (a TOML or
JSON policy file; default ``<data dir>/registry-policy.toml`` when present).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kforge.cli.options import (
    PROGRAM_HELP,
    CliError,
    add_data_dir_option,
    channel_grant,
    show_help,
)

if TYPE_CHECKING:
    from kforge.registry import Registry, RegistryPolicy, Status, VerifyOutcome

__all__ = ["POLICY_FILE_NAME", "add_commands", "format_time"]

POLICY_FILE_NAME = "registry-policy.toml"


def _positive(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def add_commands(subparsers: Any) -> None:
    """Add ``registry`` (with its own subcommands) to an ``add_subparsers()`` object."""
    registry = subparsers.add_parser("registry", help="the program registry (propose … promote)")
    registry.set_defaults(handler=lambda args: show_help(registry))
    commands = registry.add_subparsers(dest="registry_command", metavar="ACTION")

    def command(name: str, help: str, handler: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help)
        add_data_dir_option(parser, "the ledger and node key live")
        parser.add_argument(
            "--policy",
            help=f"registry policy file, TOML or JSON (default: DIR/{POLICY_FILE_NAME} "
            "when present, else the built-in policy)",
        )
        parser.set_defaults(handler=handler)
        return parser

    keygen = command("keygen", "create an agent key file for signing requests", command_keygen)
    keygen.add_argument("path", help="the new key file (PKCS#8 PEM, mode 0600)")

    propose = command("propose", "record a program with its test vectors", command_propose)
    propose.add_argument("source", help=PROGRAM_HELP)
    propose.add_argument("--name", help="the program's name (default: the source file's stem)")
    propose.add_argument("--version", required=True, help="the version being proposed")
    propose.add_argument(
        "--vectors", help="test vectors, JSON (default: NAME.vectors.json beside the source)"
    )
    propose.add_argument(
        "--grant",
        type=channel_grant,
        action="append",
        default=[],
        metavar="CH",
        help="a host channel (3..7) the program may use (repeatable)",
    )
    propose.add_argument("--ticks", type=_positive, default=1_000_000, help="declared tick bound")
    propose.add_argument("--memory", type=_positive, default=65_536, help="declared memory bound")
    propose.add_argument("--agent-key", help="the proposer's key file (default: the node key)")

    verify = command("verify", "run every gate and record the results", command_verify)
    _entry_arguments(verify)
    verify.add_argument("--json", action="store_true", help="print the outcome as JSON")

    for name, handler, help in (
        ("promote", command_promote, "promote a VERIFIED program to TRUSTED"),
        ("revoke", command_revoke, "revoke a program"),
    ):
        parser = command(name, help, handler)
        _entry_arguments(parser)
        parser.add_argument("--agent-key", required=True, help="the signing agent's key file")
        parser.add_argument("--reason", required=True, help="why, for the promotion log")

    show = command("show", "print an entry: status, gates, log", command_show)
    _entry_arguments(show)

    log = command("log", "print the promotion log", command_log)
    log.add_argument("name", nargs="?", help="only this program (default: every program)")
    log.add_argument("version", nargs="?", help="only this version")

    command("check", "verify the ledger's hash chain and artifacts", command_check)

    export = command("export", "write the container and proof bundles", command_export)
    _entry_arguments(export)
    export.add_argument("--dir", required=True, help="output folder")


def _entry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the program's name")
    parser.add_argument("version", help="its version")


def _data_dir(args: argparse.Namespace) -> Path:
    from kforge.storage import default_data_dir

    return Path(args.data_dir) if args.data_dir else default_data_dir()


def _policy(args: argparse.Namespace) -> RegistryPolicy:
    from kforge.registry import RegistryPolicy, load_policy

    if args.policy:
        return load_policy(args.policy)
    default = _data_dir(args) / POLICY_FILE_NAME
    return load_policy(default) if default.exists() else RegistryPolicy()


def _open(args: argparse.Namespace) -> Registry:
    from kforge.registry import Registry

    return Registry.open(_data_dir(args), policy=_policy(args))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise CliError(f"{path}: cannot read: {error.strerror or error}") from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as error:
        raise CliError(f"{path}: cannot write: {error.strerror or error}") from None


def command_keygen(args: argparse.Namespace) -> int:
    """``kforge registry keygen PATH``: write a new agent key, print its agent id."""
    from kforge.registry import create_agent_key

    key = create_agent_key(args.path)
    sys.stdout.write(key.public_hex + "\n")
    return 0


def command_propose(args: argparse.Namespace) -> int:
    """``kforge registry propose SOURCE --version V``: record the proposal, print its id."""
    from kforge.registry import Manifest, load_agent_key

    source_path = Path(args.source)
    name = args.name or source_path.stem
    vectors_path = (
        Path(args.vectors) if args.vectors else source_path.with_name(f"{name}.vectors.json")
    )
    manifest = Manifest(grants=tuple(args.grant), tick_budget=args.ticks, memory_quota=args.memory)
    proposer = load_agent_key(args.agent_key) if args.agent_key else None
    with _open(args) as registry:
        entry = registry.propose(
            name,
            args.version,
            _read(source_path),
            _read(vectors_path),
            manifest,
            filename=str(source_path),
            proposer=proposer,
        )
    program = entry.program_id.hex if entry.program_id else "(does not decode)"
    sys.stdout.write(f"{entry.label} PROPOSED program {program}\n")
    return 0


def _print_outcome(outcome: VerifyOutcome) -> None:
    sys.stdout.write(f"{outcome.name}@{outcome.version} attempt {outcome.attempt}: ")
    sys.stdout.write(f"{outcome.status.value}\n")
    for result in outcome.results:
        sys.stdout.write(f"  {result.gate.value:<7} {'ok' if result.passed else 'FAILED'}\n")
        for failure in result.failures:
            sys.stdout.write(f"    [{failure.kind.value}] {failure.message}\n")


def command_verify(args: argparse.Namespace) -> int:
    """``kforge registry verify NAME VERSION``: exit 0 when VERIFIED, 1 when a gate failed."""
    with _open(args) as registry:
        outcome = registry.verify(args.name, args.version)
    if args.json:
        sys.stdout.write(json.dumps(outcome.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        _print_outcome(outcome)
    return 0 if outcome.passed else 1


def _status_change(args: argparse.Namespace, to: Status) -> int:
    from kforge.registry import load_agent_key

    key = load_agent_key(args.agent_key)
    with _open(args) as registry:
        request, signature = registry.request(args.name, args.version, to, args.reason, key)
        status = registry.promote(request, signature)
    sys.stdout.write(f"{args.name}@{args.version} {request.from_status} -> {status.value}\n")
    return 0


def command_promote(args: argparse.Namespace) -> int:
    """``kforge registry promote NAME VERSION --agent-key K --reason R``: to TRUSTED."""
    from kforge.registry import Status

    return _status_change(args, Status.TRUSTED)


def command_revoke(args: argparse.Namespace) -> int:
    """``kforge registry revoke NAME VERSION --agent-key K --reason R``: to REVOKED."""
    from kforge.registry import Status

    return _status_change(args, Status.REVOKED)


def command_show(args: argparse.Namespace) -> int:
    """``kforge registry show NAME VERSION``: the entry as JSON."""
    with _open(args) as registry:
        shown = registry.show(args.name, args.version)
    sys.stdout.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
    return 0


def format_time(at_ms: int) -> str:
    """Milliseconds since the Unix epoch as an ISO 8601 UTC time, e.g. ``2026-03-01T12:00:00Z``."""
    moment = datetime.fromtimestamp(at_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def command_log(args: argparse.Namespace) -> int:
    """``kforge registry log [NAME VERSION]``: one line per promotion-log row."""
    if args.name is not None and args.version is None:
        raise CliError("registry log: give both NAME and VERSION, or neither")
    with _open(args) as registry:
        records = registry.log(args.name, args.version)
    for record in records:
        sys.stdout.write(
            f"{record.seq}\t{format_time(record.at_ms)}\t{record.entry}\t{record.from_status or '-'} -> "
            f"{record.to_status}\t{record.agent}\t{record.reason}\n"
        )
    return 0


def command_check(args: argparse.Namespace) -> int:
    """``kforge registry check``: exit 0 when the whole chain checks out, else 1."""
    with _open(args) as registry:
        check = registry.verify_ledger()
    if check.ok:
        sys.stdout.write(f"OK: {check.rows} rows, head {check.head}\n")
        return 0
    for problem in check.problems:
        sys.stdout.write(f"TAMPERED: {problem}\n")
    return 1


def command_export(args: argparse.Namespace) -> int:
    """``kforge registry export NAME VERSION --dir D``: NAME-VERSION.frgp and VECTOR.proof files."""
    folder = Path(args.dir)
    with _open(args) as registry:
        files = registry.export_files(args.name, args.version)  # names checked: never a path
    for file_name, data in files.items():
        _write(folder / file_name, data)
    program, *bundles = files
    sys.stdout.write(f"{folder / program} and {len(bundles)} proof bundle(s)\n")
    return 0
