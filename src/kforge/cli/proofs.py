"""Command-line commands for proofs: ``prove``, ``verify`` and ``keys``.

``kforge.cli`` wires them in with :func:`add_commands`; each handler takes the
parsed ``argparse.Namespace`` and returns the exit status.  A proof file is a
bundle: msgpack ``[bundle version, proof bytes, run record bytes]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Final

from kforge.cli.options import (
    PROGRAM_HELP,
    STDIO,
    TIERS,
    CliError,
    add_data_dir_option,
    add_machine_options,
    load_program,
    read_bytes,
    read_input,
    u64,
    write_output,
)

if TYPE_CHECKING:
    from kforge.proofs import ExecutionProof
    from kforge.proofs.replay import RunRecord

__all__ = ["BUNDLE_VERSION", "add_commands", "command_keys", "command_prove", "command_verify"]

BUNDLE_VERSION: Final = 1
#: ``kforge.proofs.DEFAULT_SAMPLE_INTERVAL``, written out so that the help does not
#: load the proof machinery (a test keeps the two equal).
SAMPLE_INTERVAL_HELP: Final = "K, ticks per sample (default: 4194304, 2^22)"


def add_commands(subparsers: Any) -> None:
    """Add ``prove``, ``verify`` and ``keys`` to an ``add_subparsers()`` object.

    Each parser's ``handler`` default is its command function.
    """
    prove = subparsers.add_parser("prove", help="run a program and write a signed proof")
    prove.add_argument("file", help=PROGRAM_HELP)
    prove.add_argument(
        "-o", "--output", required=True, help="where to write the proof bundle (- for stdout)"
    )
    add_machine_options(prove)
    prove.add_argument(
        "--sample-interval",
        type=u64,
        default=None,
        metavar="K",
        help=SAMPLE_INTERVAL_HELP,
    )
    add_data_dir_option(prove, "the node key lives")
    prove.set_defaults(handler=command_prove)

    verify = subparsers.add_parser("verify", help="re-execute a proof and check it")
    verify.add_argument("proof", help="the proof bundle")
    verify.add_argument("file", help="the program it is a proof of")
    verify.add_argument(
        "--public-key",
        help="expected signer: 64 hex digits or a key file (default: the key in the proof, "
        "which proves only that someone signed it)",
    )
    verify.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")
    verify.set_defaults(handler=command_verify)

    keys = subparsers.add_parser("keys", help="print the node's public key")
    keys.add_argument("--pem", action="store_true", help="print PEM instead of hex")
    add_data_dir_option(keys, "the node key lives")
    keys.set_defaults(handler=command_keys)


def command_prove(args: argparse.Namespace) -> int:
    """``kforge prove FILE -o PROOF``: run, sign, write the bundle; exit 0."""
    import msgpack

    from kforge.proofs import DEFAULT_SAMPLE_INTERVAL, generate_proof
    from kforge.proofs.keys import load_or_create_key
    from kforge.proofs.replay import RunRecord

    program = load_program(args.file, memory_quota=args.memory)
    record = RunRecord.create(
        program,
        input=read_input(args),
        environment=dict(args.env),
        grants=args.grant,
        memory_quota=args.memory,
        tick_budget=args.ticks,
    )
    record.load(program)  # refuse a quota that does not fit before signing anything
    key = load_or_create_key(args.data_dir)
    interval = DEFAULT_SAMPLE_INTERVAL if args.sample_interval is None else args.sample_interval
    proof = generate_proof(program, record, key, sample_interval=max(1, interval), tier=args.tier)
    bundle = msgpack.packb([BUNDLE_VERSION, proof.to_bytes(), record.to_bytes()], use_bin_type=True)
    write_output(args.output, bundle, "a proof bundle")
    # With the bundle itself on stdout, the line about it goes to stderr.
    (sys.stderr if args.output == STDIO else sys.stdout).write(
        f"{proof.final_state} after {proof.ticks_used} ticks; trace {proof.trace_hash}; "
        f"signed by {key.public_hex}\n"
    )
    return 0


def read_bundle(path: str) -> tuple[ExecutionProof, RunRecord]:
    """The proof and run record in a bundle file; raises ``CliError`` or ``ForgeError``."""
    import msgpack

    from kforge.proofs import ExecutionProof
    from kforge.proofs.replay import RunRecord

    blob = read_bytes(path)
    try:
        body = msgpack.unpackb(blob, raw=False)
    except Exception:  # msgpack raises several unrelated types for bad bytes
        raise CliError(f"{path}: not a proof bundle") from None
    if not (isinstance(body, list) and len(body) == 3 and body[0] == BUNDLE_VERSION):
        raise CliError(f"{path}: not a version {BUNDLE_VERSION} proof bundle")
    if not isinstance(body[1], bytes) or not isinstance(body[2], bytes):
        raise CliError(f"{path}: proof bundle parts are not byte strings")
    return ExecutionProof.from_bytes(body[1]), RunRecord.from_bytes(body[2])


def command_verify(args: argparse.Namespace) -> int:
    """``kforge verify PROOF FILE``: print OK (exit 0) or the first divergence (exit 1)."""
    from dataclasses import replace

    from kforge.proofs import verify_proof
    from kforge.proofs.keys import parse_public_key

    proof, record = read_bundle(args.proof)
    program = load_program(args.file, memory_quota=record.memory_quota)
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
    from kforge.proofs.keys import load_or_create_key

    key = load_or_create_key(args.data_dir)
    sys.stdout.write(key.public_pem() if args.pem else key.public_hex + "\n")
    return 0
