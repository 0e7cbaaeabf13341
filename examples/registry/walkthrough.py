"""The registry end to end: a library proposed, verified, promoted, linked, run and proven.

    python examples/registry/walkthrough.py [WORK_DIR]

Everything (ledger, node key, agent key, policy, outputs) goes under WORK_DIR
(default: a fresh temporary folder), never the real home.  Steps:

1. create an agent key and a policy that lets that agent promote;
2. propose ``numlib`` with its test vectors, run the gates, promote it to TRUSTED;
3. link ``use_numlib`` against the TRUSTED library (fetching only trusted
   programs), and take the linked program through the same gates;
4. run it the way a TRUSTED-only engine would: ``check_runnable`` first;
5. export every stored proof bundle and check it with ``kforge verify``;
6. revoke the app and show that it is refused, naming the revocation;
7. check the whole ledger's hash chain.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from kforge.asm import assemble
from kforge.cli import main as kforge_main
from kforge.link import derive_imports, link
from kforge.machine import Machine
from kforge.registry import (
    Manifest,
    ProgramRevoked,
    Registry,
    Status,
    TrustPolicy,
    VerifyOutcome,
    create_agent_key,
    load_policy,
)

HERE = Path(__file__).resolve().parent


def _report(outcome: VerifyOutcome) -> None:
    gates = ", ".join(f"{r.gate.value} {'ok' if r.passed else 'FAILED'}" for r in outcome.results)
    print(f"  verify {outcome.name}@{outcome.version}: {outcome.status.value} ({gates})")
    for failure in outcome.failures:
        print(f"    [{failure.kind.value}] {failure.message}")


def run(work_dir: Path) -> int:
    """The walkthrough in ``work_dir``; returns 0 when every step did what it should."""
    data_dir = work_dir / "data"
    out_dir = work_dir / "out"
    agent = create_agent_key(work_dir / "agent.pem")
    policy_file = work_dir / "policy.toml"
    policy_file.write_text(
        "[registry]\n"
        "grantable_channels = [3]\n"
        "max_tick_budget = 100000\n"
        f'promoters = ["{agent.public_hex}"]\n'
    )
    print(f"1. agent {agent.public_hex[:16]}… may promote ({policy_file.name})")

    with Registry.open(data_dir, policy=load_policy(policy_file)) as registry:
        library = registry.propose(
            "numlib",
            "1.0",
            (HERE / "numlib.fasm").read_bytes(),
            (HERE / "numlib.vectors.json").read_bytes(),
            Manifest(tick_budget=10_000, memory_quota=4096),
            filename="numlib.fasm",
        )
        print(f"2. proposed numlib@1.0 = program {library.program_id}")
        outcome = registry.verify("numlib", "1.0")
        _report(outcome)
        if not outcome.passed:
            return 1
        registry.promote(*registry.request("numlib", "1.0", Status.TRUSTED, "reviewed", agent))
        print(f"  numlib@1.0 is {registry.status('numlib', '1.0').value}")

        app = assemble((HERE / "use_numlib.fasm").read_text(), "use_numlib.fasm")
        libraries = [registry.program("numlib", "1.0")]
        linked = link(app, derive_imports(app, libraries), registry.trusted_program)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "use_numlib.frgp").write_bytes(linked.encoded)
        registry.propose(
            "use_numlib",
            "1.0",
            linked.encoded,
            (HERE / "use_numlib.vectors.json").read_bytes(),
            Manifest(tick_budget=10_000, memory_quota=4096),
        )
        print(f"3. linked use_numlib against TRUSTED numlib = program {linked.program_id}")
        outcome = registry.verify("use_numlib", "1.0")
        _report(outcome)
        if not outcome.passed:
            return 1
        registry.promote(*registry.request("use_numlib", "1.0", Status.TRUSTED, "ok", agent))

        trust = TrustPolicy(registry)
        trust.check_runnable(linked.program_id)  # what the engine does at sandbox creation
        machine = Machine.load(linked, memory_quota=4096, tick_budget=10_000)
        machine.run()
        print(f"4. ran use_numlib: {machine.state.value}, stdout {bytes(machine.stdout)!r}")
        if bytes(machine.stdout) != b"21\n12\n":
            return 1

        print("5. kforge verify on every stored proof:")
        node_key = registry.node_key.public_hex
        for name in ("numlib", "use_numlib"):
            program_file = out_dir / f"{name}-1.0.frgp"
            program_file.write_bytes(registry.program(name, "1.0").encoded)
            for vector, bundle in sorted(registry.proof_bundles(name, "1.0").items()):
                proof_file = out_dir / f"{name}-1.0.{vector}.proof"
                proof_file.write_bytes(bundle)
                print(f"  {proof_file.name}: ", end="", flush=True)
                argv = ["verify", str(proof_file), str(program_file), "--public-key", node_key]
                if kforge_main(argv) != 0:
                    return 1

        registry.revoke(
            *registry.request("use_numlib", "1.0", Status.REVOKED, "superseded by 1.1", agent)
        )
        try:
            trust.check_runnable(linked.program_id)
        except ProgramRevoked as refused:
            print(f"6. refused: {refused}")
        else:
            return 1

        check = registry.verify_ledger()
        print(
            f"7. ledger: {'OK' if check.ok else 'TAMPERED'}, {check.rows} rows, head {check.head}"
        )
        print(json.dumps([r.to_json() for r in registry.log()][-3:], indent=1))
        return 0 if check.ok else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        return run(Path(args[0]))
    with tempfile.TemporaryDirectory(prefix="kforge-registry-") as folder:
        return run(Path(folder))


if __name__ == "__main__":
    sys.exit(main())
