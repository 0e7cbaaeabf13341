"""Command-line commands for proofs: ``prove``, ``verify`` and ``keys``.

``kforge.cli`` wires them in with :func:`add_commands`; each handler takes the
parsed ``argparse.Namespace`` and returns the exit status.  A proof file is a
bundle: msgpack ``[bundle version, proof bytes, run record bytes]``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import msgpack

from kforge.core import ForgeError
from kforge.keys import load_or_create_key, parse_public_key
from kforge.proofs import DEFAULT_SAMPLE_INTERVAL, ExecutionProof, generate_proof, verify_proof
from kforge.replay import RunRecord

__all__ = ["BUNDLE_VERSION", "add_commands", "command_keys", "command_prove", "command_verify"]

BUNDLE_VERSION: Final = 1


def _u64(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..2^64-1")
    return value


def _grant(text: str) -> int:
    value = _u64(text)
    if not 3 <= value <= 7:
        raise argparse.ArgumentTypeError(f"channel {value} cannot be granted (only 3..7)")
    return value


def _environment_entry(text: str) -> tuple[bytes, bytes]:
    key, separator, value = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.encode(), value.encode()


def add_commands(subparsers: Any) -> None:
    """Add ``prove``, ``verify`` and ``keys`` to an ``add_subparsers()`` object.

    Each parser's ``handler`` default is its command function.
    """
    prove = subparsers.add_parser("prove", help="run a program and write a signed proof")
    prove.add_argument("file")
    prove.add_argument("-o", "--output", required=True, help="where to write the proof bundle")
    prove.add_argument("--ticks", type=_u64, default=1_000_000, help="tick budget")
    prove.add_argument("--memory", type=_u64, default=65_536, help="memory quota in bytes")
    source = prove.add_mutually_exclusive_group()
    source.add_argument("--input", default="", help="stdin text (UTF-8)")
    source.add_argument("--input-file", help="file whose bytes are stdin")
    prove.add_argument("--grant", type=_grant, action="append", default=[])
    prove.add_argument(
        "--env",
        type=_environment_entry,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment entry (repeatable)",
    )
    prove.add_argument(
        "--sample-interval",
        type=_u64,
        default=DEFAULT_SAMPLE_INTERVAL,
        help="K, ticks per sample",
    )
    prove.add_argument("--tier", choices=("auto", "reference", "fast"), default="auto")
    prove.add_argument("--data-dir", help="where the node key lives")
    prove.set_defaults(handler=command_prove)

    verify = subparsers.add_parser("verify", help="re-execute a proof and check it")
    verify.add_argument("proof")
    verify.add_argument("file")
    verify.add_argument("--public-key", help="expected signer: 64 hex digits or a key file")
    verify.add_argument("--tier", choices=("auto", "reference", "fast"), default="auto")
    verify.set_defaults(handler=command_verify)

    keys = subparsers.add_parser("keys", help="print the node's public key")
    keys.add_argument("--pem", action="store_true", help="print PEM instead of hex")
    keys.add_argument("--data-dir", help="where the node key lives")
    keys.set_defaults(handler=command_keys)


def _cli_error(message: str) -> Exception:
    from kforge.cli import CliError  # here, not at the top: kforge.cli imports this module

    return CliError(message)


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise _cli_error(f"{path}: cannot read: {error.strerror or error}") from None


def _read_input(args: argparse.Namespace) -> bytes:
    if args.input_file is not None:
        return _read_bytes(args.input_file)
    data: bytes = args.input.encode("utf-8", "surrogateescape")
    return data


def command_prove(args: argparse.Namespace) -> int:
    """``kforge prove FILE -o PROOF``: run, sign, write the bundle; exit 0."""
    from kforge.cli import load_program

    program = load_program(args.file)
    record = RunRecord.create(
        program,
        input=_read_input(args),
        environment=dict(args.env),
        grants=args.grant,
        memory_quota=args.memory,
        tick_budget=args.ticks,
    )
    record.load(program)  # refuse a quota that does not fit before signing anything
    key = load_or_create_key(args.data_dir)
    proof = generate_proof(
        program, record, key, sample_interval=max(1, args.sample_interval), tier=args.tier
    )
    bundle = msgpack.packb([BUNDLE_VERSION, proof.to_bytes(), record.to_bytes()], use_bin_type=True)
    try:
        Path(args.output).write_bytes(bundle)
    except OSError as error:
        raise _cli_error(f"{args.output}: cannot write: {error.strerror or error}") from None
    sys.stdout.write(
        f"{proof.final_state} after {proof.ticks_used} ticks; trace {proof.trace_hash}; "
        f"signed by {key.public_hex}\n"
    )
    return 0


def read_bundle(path: str) -> tuple[ExecutionProof, RunRecord]:
    """The proof and run record in a bundle file; raises ``CliError`` or ``ForgeError``."""
    try:
        body = msgpack.unpackb(_read_bytes(path), raw=False)
    except ForgeError:
        raise
    except Exception as error:
        if type(error).__name__ == "CliError":
            raise
        raise _cli_error(f"{path}: not a proof bundle ({type(error).__name__})") from None
    if not (isinstance(body, list) and len(body) == 3 and body[0] == BUNDLE_VERSION):
        raise _cli_error(f"{path}: not a version {BUNDLE_VERSION} proof bundle")
    if not isinstance(body[1], bytes) or not isinstance(body[2], bytes):
        raise _cli_error(f"{path}: proof bundle parts are not byte strings")
    return ExecutionProof.from_bytes(body[1]), RunRecord.from_bytes(body[2])


def command_verify(args: argparse.Namespace) -> int:
    """``kforge verify PROOF FILE``: print OK (exit 0) or the first divergence (exit 1)."""
    from kforge.cli import load_program

    proof, record = read_bundle(args.proof)
    program = load_program(args.file)
    public_key: Any = parse_public_key(args.public_key) if args.public_key else proof.forge_key
    if program.program_id != record.program_id:
        # Re-execute FILE under the proven parameters; the report names the program mismatch.
        record = replace(record, program_id=program.program_id)
    report = verify_proof(proof, program, record, public_key, tier=args.tier)
    if report.ok:
        pinned = "" if args.public_key else " (signer key taken from the proof, not pinned)"
        sys.stdout.write(f"OK: signed by {proof.forge_key.hex()}{pinned}\n")
        return 0
    sys.stdout.write(f"MISMATCH: {report.summary()}\n")
    return 1


def command_keys(args: argparse.Namespace) -> int:
    """``kforge keys``: print the node's public key (created on first use)."""
    key = load_or_create_key(args.data_dir)
    sys.stdout.write(key.public_pem() if args.pem else key.public_hex + "\n")
    return 0
