"""The program registry: lifecycle, gates, failure classification, signatures, tampering."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kforge.core import AgentId, Hash256
from kforge.link import Import, link
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.proofs import ExecutionProof, Signer, generate_proof, trace_hash
from kforge.proofs.keys import NodeKey
from kforge.proofs.replay import RunRecord
from kforge.registry import (
    SCHEMA_VERSION,
    FailureKind,
    Gate,
    InvalidName,
    InvalidTransition,
    LedgerTampered,
    Manifest,
    PolicyError,
    ProgramNotTrusted,
    ProgramRevoked,
    PromotionRefused,
    Registry,
    RegistryError,
    RegistryPolicy,
    Status,
    TrustPolicy,
    UnknownProgram,
    VectorFormatError,
    load_policy,
    parse_vectors,
)
from kforge.registry.signing import REQUEST_TAG, StatusRequest, parse_request

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "registry"
NUMLIB = (EXAMPLES / "numlib.fasm").read_bytes()
NUMLIB_VECTORS = (EXAMPLES / "numlib.vectors.json").read_bytes()

ECHO = b"LI r1, 0\nLI r2, 64\nRECV 2, r3, r1, r2\nSEND 0, r1, r3\nHALT\n"


def vectors(*entries: dict[str, Any]) -> bytes:
    return json.dumps({"vectors": list(entries)}).encode()


ECHO_VECTORS = vectors({"name": "hi", "input": "hi", "output": "hi"})


class Clock:
    """An injected millisecond clock."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def agent() -> NodeKey:
    return NodeKey.generate()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(tmp_path: Path, agent: NodeKey, clock: Clock) -> Iterator[Registry]:
    policy = RegistryPolicy(
        grantable_channels=frozenset({3}),
        max_tick_budget=1_000_000,
        promoters=frozenset({AgentId(agent.public_raw)}),
    )
    with Registry(
        tmp_path / "registry.sqlite3", node_key=NodeKey.generate(), policy=policy, clock=clock
    ) as opened:
        yield opened


def verified(registry: Registry, name: str = "echo", source: bytes = ECHO) -> None:
    registry.propose(name, "1", source, ECHO_VECTORS if source == ECHO else NUMLIB_VECTORS)
    outcome = registry.verify(name, "1")
    assert outcome.passed, outcome.to_json()


def trusted(registry: Registry, agent: NodeKey, name: str = "echo", source: bytes = ECHO) -> None:
    verified(registry, name, source)
    registry.promote(*registry.request(name, "1", Status.TRUSTED, "reviewed", agent))


# --------------------------------------------------------------------------- lifecycle


def test_every_status_transition_from_proposed_to_revoked(
    registry: Registry, agent: NodeKey
) -> None:
    entry = registry.propose("numlib", "1.0", NUMLIB, NUMLIB_VECTORS)
    assert registry.status("numlib", "1.0") is Status.PROPOSED
    assert entry.program_id is not None

    outcome = registry.verify("numlib", "1.0")
    assert outcome.passed and outcome.status is Status.VERIFIED
    assert [r.gate for r in outcome.results] == list(Gate)

    status = registry.promote(*registry.request("numlib", "1.0", Status.TRUSTED, "ok", agent))
    assert status is Status.TRUSTED
    registry.check_runnable(entry.program_id)

    registry.revoke(*registry.request("numlib", "1.0", Status.REVOKED, "bug #7", agent))
    assert registry.status("numlib", "1.0") is Status.REVOKED
    log = registry.log("numlib", "1.0")
    assert [(r.from_status, r.to_status) for r in log] == [
        (None, "PROPOSED"),
        ("PROPOSED", "BUILT"),
        ("BUILT", "VERIFIED"),
        ("VERIFIED", "TRUSTED"),
        ("TRUSTED", "REVOKED"),
    ]
    assert log[-1].agent == agent.public_hex and log[-1].reason == "bug #7"
    assert registry.verify_ledger().ok


def test_a_revoked_program_is_refused_naming_the_revocation(
    registry: Registry, agent: NodeKey, clock: Clock
) -> None:
    trusted(registry, agent)
    program_id = registry.entry("echo", "1").program_id
    assert program_id is not None
    clock.now += 5
    registry.revoke(*registry.request("echo", "1", Status.REVOKED, "leaks secrets", agent))
    with pytest.raises(ProgramRevoked) as caught:
        registry.check_runnable(program_id)
    error = caught.value
    assert (error.agent, error.at_ms, error.reason) == (
        agent.public_hex,
        clock.now,
        "leaks secrets",
    )
    assert "leaks secrets" in str(error) and agent.public_hex in str(error)
    with pytest.raises(ProgramRevoked):
        TrustPolicy(registry, trusted_only=False).check_runnable(program_id)
    with pytest.raises(InvalidTransition, match="REVOKED is final"):
        registry.promote(*registry.request("echo", "1", Status.TRUSTED, "again", agent))


def test_a_revoked_program_can_be_revoked_before_trust(registry: Registry, agent: NodeKey) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    registry.revoke(*registry.request("echo", "1", Status.REVOKED, "withdrawn", agent))
    with pytest.raises(InvalidTransition):
        registry.verify("echo", "1")


def test_check_runnable_refuses_unknown_and_untrusted_programs(registry: Registry) -> None:
    with pytest.raises(ProgramNotTrusted, match="not in the registry"):
        registry.check_runnable(Hash256.of(b"nothing"))
    verified(registry)
    program_id = registry.entry("echo", "1").program_id
    assert program_id is not None
    with pytest.raises(ProgramNotTrusted, match="VERIFIED"):
        registry.check_runnable(program_id)
    TrustPolicy(registry, trusted_only=False).check_runnable(program_id)
    with pytest.raises(ProgramNotTrusted):
        TrustPolicy(registry).check_runnable(program_id)


def test_a_name_and_version_is_proposed_once(registry: Registry) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    with pytest.raises(InvalidTransition, match="already proposed"):
        registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    with pytest.raises(UnknownProgram):
        registry.status("echo", "2")


def test_verified_programs_are_not_verified_again(registry: Registry) -> None:
    verified(registry)
    with pytest.raises(InvalidTransition):
        registry.verify("echo", "1")


# --------------------------------------------------------------------------- promotion refusals


def test_promotion_skipping_the_gates_is_refused(registry: Registry, agent: NodeKey) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    with pytest.raises(PromotionRefused, match="gates not green") as caught:
        registry.promote(*registry.request("echo", "1", Status.TRUSTED, "skip", agent))
    assert caught.value.facts["gates"] == {g.value: "not run" for g in Gate}
    assert registry.status("echo", "1") is Status.PROPOSED


def test_promotion_with_a_failed_gate_is_refused(registry: Registry, agent: NodeKey) -> None:
    registry.propose("echo", "1", ECHO, vectors({"name": "hi", "input": "hi", "output": "ho"}))
    outcome = registry.verify("echo", "1")
    assert outcome.status is Status.BUILT and not outcome.passed
    with pytest.raises(PromotionRefused, match="test failed") as caught:
        registry.promote(*registry.request("echo", "1", Status.TRUSTED, "please", agent))
    assert caught.value.facts["gates"] == {"test": "failed"}
    assert caught.value.facts["failures"][0]["facts"]["vector"] == "hi"


def test_promotion_to_built_or_verified_by_hand_is_refused(
    registry: Registry, agent: NodeKey
) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    with pytest.raises(InvalidTransition, match="only the gates"):
        registry.promote(*registry.request("echo", "1", Status.VERIFIED, "trust me", agent))


def test_promotion_by_an_agent_the_policy_does_not_allow_is_refused(registry: Registry) -> None:
    verified(registry)
    stranger = NodeKey.generate()
    with pytest.raises(PromotionRefused, match="may not promote"):
        registry.promote(*registry.request("echo", "1", Status.TRUSTED, "me", stranger))
    assert registry.status("echo", "1") is Status.VERIFIED


def test_promotion_with_a_bad_signature_is_refused(registry: Registry, agent: NodeKey) -> None:
    verified(registry)
    request, signature = registry.request("echo", "1", Status.TRUSTED, "ok", agent)
    forged = bytes([signature[0] ^ 1]) + signature[1:]
    with pytest.raises(PromotionRefused, match="signature"):
        registry.promote(request, forged)
    altered = dataclasses.replace(request, reason="something else")
    with pytest.raises(PromotionRefused, match="signature"):
        registry.promote(altered, signature)
    # Signed by another key but claiming the allowed agent.
    impostor = NodeKey.generate()
    with pytest.raises(PromotionRefused, match="signature"):
        registry.promote(request, impostor.sign(request.canonical_bytes()))
    assert registry.status("echo", "1") is Status.VERIFIED


def test_a_stale_or_replayed_request_is_refused(
    registry: Registry, agent: NodeKey, clock: Clock
) -> None:
    verified(registry)
    request, signature = registry.request("echo", "1", Status.TRUSTED, "ok", agent)
    clock.now += 601_000
    with pytest.raises(PromotionRefused, match="old"):
        registry.promote(request, signature)
    clock.now -= 601_000
    registry.promote(request, signature)
    with pytest.raises(InvalidTransition, match="says it is VERIFIED"):
        registry.promote(request, signature)


def test_a_request_for_another_program_id_is_refused(registry: Registry, agent: NodeKey) -> None:
    verified(registry)
    request, _ = registry.request("echo", "1", Status.TRUSTED, "ok", agent)
    other = dataclasses.replace(request, program_id=bytes(32))
    with pytest.raises(PromotionRefused, match="another program id"):
        registry.promote(other, other.sign(agent))


# --------------------------------------------------------------------------- failure classification


def _failures(registry: Registry, source: bytes, vector_file: bytes, **manifest: Any) -> Any:
    registry.propose("p", "1", source, vector_file, Manifest(**manifest), filename="p.fasm")
    outcome = registry.verify("p", "1")
    assert not outcome.passed
    json.dumps(outcome.to_json())  # the whole outcome is plain JSON for the agent
    return outcome


def test_decode_failure_names_line_and_column(registry: Registry) -> None:
    outcome = _failures(registry, b"LI r1, 0\nADD r1, r2, r256\n", ECHO_VECTORS)
    assert outcome.status is Status.PROPOSED and outcome.program_id is None
    (failure,) = outcome.failures
    assert failure.kind is FailureKind.DECODE
    assert (failure.facts["line"], failure.facts["column"]) == (2, 13)
    assert [r.gate for r in outcome.results] == [Gate.DECODE]


def test_a_non_canonical_container_fails_the_decode_gate(registry: Registry) -> None:
    from kforge.asm import assemble

    blob = assemble(ECHO.decode()).encoded + b"\x00"
    outcome = _failures(registry, blob, ECHO_VECTORS)
    assert outcome.failures[0].kind is FailureKind.DECODE
    assert "trailing" in outcome.failures[0].message


def test_static_failures_name_each_instruction(registry: Registry) -> None:
    source = b"JMP 40\n.insn 0xEE, 0, 0, 0, 0\nSEND 3, r1, r2\nHALT\n"
    outcome = _failures(
        registry,
        source,
        vectors({"input": "", "output": "", "ticks": 5000}),
        tick_budget=1000,
    )
    facts = [(f.kind, dict(f.facts)) for f in outcome.failures]
    assert facts[0] == (
        FailureKind.STATIC,
        {"index": 0, "mnemonic": "JMP", "target": 40, "code_length": 4},
    )
    assert facts[1] == (FailureKind.STATIC, {"index": 1, "opcode": 0xEE})
    assert facts[2][1]["channel"] == 3 and facts[2][1]["requested"] == [0, 1, 2]
    assert facts[3][1] == {"vector": "vector-0", "bound": "ticks", "value": 5000, "declared": 1000}
    assert Gate.TEST not in [r.gate for r in outcome.results]


def test_unknown_opcodes_pass_when_the_policy_allows_them(registry: Registry) -> None:
    registry.policy = dataclasses.replace(registry.policy, allow_unknown_opcodes=True)
    source = b"JZ r0, skip\n.insn 0xEE, 0, 0, 0, 0\nskip: HALT\n"
    registry.propose("p", "1", source, vectors({"output": ""}))
    assert registry.verify("p", "1").passed


def test_policy_failures_name_the_channel_and_quota(registry: Registry) -> None:
    outcome = _failures(registry, ECHO, ECHO_VECTORS, grants=(4,), tick_budget=2_000_000)
    kinds = {f.kind for f in outcome.failures}
    assert kinds == {FailureKind.POLICY}
    facts = [dict(f.facts) for f in outcome.failures]
    assert facts[0] == {"channels": [4], "grantable": [3]}
    assert facts[1] == {"quota": "tick_budget", "declared": 2_000_000, "maximum": 1_000_000}


def test_a_corrected_retry_after_a_policy_change_is_attempt_two(
    registry: Registry,
) -> None:
    registry.propose("p", "1", ECHO, ECHO_VECTORS, Manifest(grants=(4,)))
    assert registry.verify("p", "1").failures[0].kind is FailureKind.POLICY
    registry.policy = dataclasses.replace(registry.policy, grantable_channels=frozenset({3, 4}))
    outcome = registry.verify("p", "1")
    assert outcome.passed and outcome.attempt == 2 and outcome.status is Status.VERIFIED
    assert registry.gate_results("p", "1", attempt=1)[2].passed is False


def test_test_failure_gives_expected_and_actual_output(registry: Registry) -> None:
    outcome = _failures(registry, ECHO, vectors({"name": "v", "input": "abc", "output": "abd"}))
    (failure,) = outcome.failures
    assert failure.kind is FailureKind.TEST
    assert failure.facts["vector"] == "v"
    assert failure.facts["expected_output"]["text"] == "abd"
    assert failure.facts["actual_output"]["text"] == "abc"
    assert failure.facts["first_difference"] == 2
    assert failure.facts["actual_state"] == "HALTED"
    # A failing run still has its signed proof stored, and the proof gate passed.
    assert [r.passed for r in outcome.results] == [True, True, True, False, True]
    assert set(registry.proof_bundles("p", "1")) == {"v"}


def test_running_out_of_declared_ticks_is_a_test_failure(registry: Registry) -> None:
    loop = b"top: JMP top\n"
    outcome = _failures(registry, loop, vectors({"name": "spin", "output": ""}), tick_budget=50)
    facts = outcome.failures[0].facts
    assert facts["fault"] == "OUT_OF_TICKS" and facts["out_of_ticks"] is True
    assert (facts["ticks_used"], facts["tick_budget"]) == (50, 50)


def test_a_proof_that_does_not_replay_is_classified_with_the_divergent_sample(
    tmp_path: Path, agent: NodeKey, clock: Clock
) -> None:
    def lying_prover(
        program: ForgeProgram, record: RunRecord, key: Signer, *, tier: str = "auto"
    ) -> ExecutionProof:
        honest = generate_proof(program, record, key, sample_interval=4, tier=tier)
        samples = (*honest.samples[:-1], bytes(32))
        forged = dataclasses.replace(
            honest,
            samples=samples,
            trace_hash=trace_hash(honest.sample_interval, samples),
            forge_sig=b"",
        )
        return dataclasses.replace(forged, forge_sig=key.sign(forged.signed_bytes()))

    node = NodeKey.generate()
    with Registry(tmp_path / "r.sqlite3", node_key=node, clock=clock, prover=lying_prover) as reg:
        reg.propose("echo", "1", ECHO, ECHO_VECTORS)
        outcome = reg.verify("echo", "1")
    assert outcome.status is Status.BUILT
    (failure,) = outcome.failures
    assert failure.kind is FailureKind.PROOF and failure.facts["vector"] == "hi"
    assert failure.facts["signature_valid"] is True
    assert failure.facts["first_divergent_sample"] is not None
    assert failure.facts["divergent_ticks"] is not None
    assert any("trace_hash" in problem for problem in failure.facts["problems"])


# --------------------------------------------------------------------------- ledger integrity


def _tamper(registry: Registry, table: str, statement: str) -> None:
    db = registry.ledger.connection
    db.execute(f"DROP TRIGGER {table}_no_update")
    db.execute(statement)


def test_updates_and_deletes_are_refused_by_the_ledger(registry: Registry) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    db = registry.ledger.connection
    for statement in (
        "UPDATE promotions SET to_status = 'TRUSTED'",
        "DELETE FROM promotions",
        "UPDATE artifacts SET data = x'00'",
        "DELETE FROM chain",
        "UPDATE programs SET name = 'other'",
    ):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(statement)


def test_a_tampered_promotion_row_is_detected(registry: Registry, agent: NodeKey) -> None:
    verified(registry)
    program_id = registry.entry("echo", "1").program_id
    assert program_id is not None
    _tamper(
        registry,
        "promotions",
        "UPDATE promotions SET to_status = 'TRUSTED' WHERE seq = (SELECT MAX(seq) FROM promotions)",
    )
    check = registry.verify_ledger()
    assert not check.ok and any("promotions row" in p for p in check.problems)
    with pytest.raises(LedgerTampered):
        registry.check_runnable(program_id)
    with pytest.raises(LedgerTampered):
        registry.status("echo", "1")


def test_a_tampered_artifact_is_detected_at_run_time(registry: Registry, agent: NodeKey) -> None:
    trusted(registry, agent)
    program_id = registry.entry("echo", "1").program_id
    assert program_id is not None
    registry.check_runnable(program_id)
    _tamper(
        registry,
        "artifacts",
        "UPDATE artifacts SET data = data || x'00' WHERE kind = 'container'",
    )
    assert any("bytes do not match" in p for p in registry.verify_ledger().problems)
    with pytest.raises(LedgerTampered, match="do not match their hash"):
        registry.check_runnable(program_id)


def test_a_rewritten_artifact_hash_breaks_the_chain(registry: Registry, agent: NodeKey) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    fake = b"HALT\n"
    _tamper(
        registry,
        "artifacts",
        f"UPDATE artifacts SET data = x'{fake.hex()}', hash = x'{Hash256.of(fake).hex}', "
        "size = 5 WHERE kind = 'source'",
    )
    problems = registry.verify_ledger().problems
    assert any("artifacts row" in p and "tampered" in p for p in problems)


def test_a_deleted_row_breaks_the_chain(registry: Registry) -> None:
    verified(registry)
    db = registry.ledger.connection
    db.execute("DROP TRIGGER gate_results_no_delete")
    db.execute("DROP TRIGGER chain_no_delete")
    db.execute("DELETE FROM gate_results WHERE gate = 'proof'")
    db.execute(
        "DELETE FROM chain WHERE kind = 'gate_results' AND seq = (SELECT MAX(seq) FROM "
        "chain WHERE kind = 'gate_results')"
    )
    check = registry.verify_ledger()
    assert not check.ok and any("missing" in p or "follow" in p for p in check.problems)


def test_schema_is_versioned_and_a_newer_ledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite3"
    with Registry(path, node_key=NodeKey.generate()) as registry:
        assert registry.ledger.schema_version == SCHEMA_VERSION
        registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    with Registry(path, node_key=NodeKey.generate()) as registry:
        assert registry.status("echo", "1") is Status.PROPOSED
        registry.ledger.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RegistryError, match="newer"):
        Registry(path, node_key=NodeKey.generate())


def test_registry_open_uses_the_data_directory(tmp_path: Path) -> None:
    with Registry.open(tmp_path / "data") as registry:
        registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    assert (tmp_path / "data" / "registry.sqlite3").exists()
    assert (tmp_path / "data" / "forge_ed25519.pem").exists()


# --------------------------------------------------------------------------- files and linking


def test_vector_and_policy_files_are_parsed_strictly(tmp_path: Path) -> None:
    assert parse_vectors(NUMLIB_VECTORS)[3].tick_budget == 2000
    with pytest.raises(VectorFormatError, match="no expected output"):
        parse_vectors(vectors({"input": "x"}))
    with pytest.raises(VectorFormatError, match="grants"):
        parse_vectors(vectors({"output": "", "grants": [9]}))
    toml = tmp_path / "policy.toml"
    key = NodeKey.generate()
    toml.write_text(f'[registry]\ngrantable_channels = [3, 4]\npromoters = ["{key.public_hex}"]\n')
    policy = load_policy(toml)
    assert policy.grantable_channels == {3, 4} and AgentId(key.public_raw) in policy.promoters
    bad = tmp_path / "policy.json"
    bad.write_text('{"grantable_channels": [9]}')
    with pytest.raises(PolicyError, match=r"3\.\.7"):
        load_policy(bad)
    bad.write_text('{"promoterz": []}')
    with pytest.raises(PolicyError, match="unknown key"):
        load_policy(bad)


def test_linking_fetches_only_trusted_libraries(registry: Registry, agent: NodeKey) -> None:
    from kforge.asm import assemble

    registry.propose("numlib", "1", NUMLIB, NUMLIB_VECTORS)
    library_id = registry.entry("numlib", "1").program_id
    assert library_id is not None
    app = assemble((EXAMPLES / "use_numlib.fasm").read_text())
    imports = [Import(library_id, (b"gcd", b"print_u64"))]
    with pytest.raises(ProgramNotTrusted):
        link(app, imports, registry.trusted_program)
    registry.verify("numlib", "1")
    registry.promote(*registry.request("numlib", "1", Status.TRUSTED, "ok", agent))
    linked = link(app, imports, registry.trusted_program)
    machine = Machine.load(linked)
    assert machine.run() is MachineState.HALTED and bytes(machine.stdout) == b"21\n12\n"


# --------------------------------------------------------------------------- engine trust


def test_an_engine_in_trusted_only_mode_runs_trusted_programs_and_refuses_others(
    registry: Registry, agent: NodeKey, clock: Clock
) -> None:
    import asyncio

    from kforge.asm import assemble
    from kforge.engine import CreateSandbox, Engine
    from kforge.storage import Vault

    trusted(registry, agent)
    echo_id = registry.entry("echo", "1").program_id
    assert echo_id is not None
    owner = AgentId(bytes(range(32)))

    async def scenario() -> None:
        vault = Vault(":memory:")
        async with Engine(vault=vault, trust=TrustPolicy(registry), tier="reference") as engine:
            assert vault.put(registry.program("echo", "1").encoded) == echo_id
            untrusted = vault.put(assemble("HALT\n").encoded)  # never proposed
            sandbox = await engine.create_sandbox(
                CreateSandbox(
                    owner=owner, code=echo_id, memory_quota=4096, tick_budget=100, input=b"hi"
                )
            )
            await engine.exec_start(sandbox, owner)
            result = await engine.wait(sandbox)
            assert result.output == b"hi"
            with pytest.raises(ProgramNotTrusted):
                await engine.create_sandbox(
                    CreateSandbox(owner=owner, code=untrusted, memory_quota=4096, tick_budget=100)
                )
            clock.now += 1
            registry.revoke(*registry.request("echo", "1", Status.REVOKED, "unsafe", agent))
            with pytest.raises(ProgramRevoked, match="unsafe"):
                await engine.create_sandbox(
                    CreateSandbox(owner=owner, code=echo_id, memory_quota=4096, tick_budget=100)
                )

    asyncio.run(scenario())


# --------------------------------------------------------------------------- authority and names


def _forge_promotion(registry: Registry, name: str, version: str, key: NodeKey) -> None:
    """Append a VERIFIED -> TRUSTED row signed by ``key``, as anyone who can write the file can."""
    entry = registry.entry(name, version)
    assert entry.program_id is not None
    request = StatusRequest(
        name,
        version,
        entry.program_id.raw,
        "VERIFIED",
        "TRUSTED",
        "self-promoted",
        registry.clock(),
        AgentId(key.public_raw),
    )
    with registry.ledger.transaction() as db:
        registry._append_promotion(db, entry.seq, Status.VERIFIED, request, request.sign(key))


def test_a_trusted_row_signed_by_a_non_promoter_is_refused(registry: Registry) -> None:
    verified(registry)
    program_id = registry.entry("echo", "1").program_id
    assert program_id is not None
    mallory = NodeKey.generate()
    _forge_promotion(registry, "echo", "1", mallory)
    assert registry.ledger.verify().ok  # the chain itself is intact: the row was appended
    with pytest.raises(LedgerTampered, match="not a promoter") as error:
        registry.check_runnable(program_id)
    assert mallory.public_hex in str(error.value)
    check = registry.verify_ledger()
    assert not check.ok and any("not a promoter" in p for p in check.problems)


def test_a_trusted_row_that_says_other_than_its_request_is_refused(
    registry: Registry, agent: NodeKey
) -> None:
    trusted(registry, agent)
    verified(registry, "other")
    other = registry.entry("other", "1")
    # A promoter's genuine request for echo@1, chained again under another entry.
    row = registry._promotions(registry.entry("echo", "1"))[-1]
    with registry.ledger.transaction() as db:
        registry.ledger.append(
            db, "promotions", {**{k: row[k] for k in row if k != "seq"}, "program_seq": other.seq}
        )
    assert other.program_id is not None
    with pytest.raises(LedgerTampered, match="does not say what its signed request says"):
        registry.check_runnable(other.program_id)
    assert not registry.verify_ledger().ok


@pytest.mark.parametrize("name", ["../escaped", "a/b", ".hidden", "", "x" * 129, "a\nb", "-rf"])
def test_a_proposal_name_that_could_be_a_path_is_refused(registry: Registry, name: str) -> None:
    with pytest.raises(InvalidName):
        registry.propose(name, "1", ECHO, ECHO_VECTORS)
    with pytest.raises(InvalidName):
        registry.propose("echo", name, ECHO, ECHO_VECTORS)
    with pytest.raises(VectorFormatError, match="name"):
        parse_vectors(vectors({"name": name or "/", "input": "hi", "output": "hi"}))


def test_export_never_writes_a_name_from_the_ledger_as_a_path(
    registry: Registry, agent: NodeKey
) -> None:
    trusted(registry, agent)
    assert set(registry.export_files("echo", "1")) == {"echo-1.frgp", "echo-1.hi.proof"}
    # A ledger written by hand may hold any name; export checks what it reads.
    with registry.ledger.transaction() as db:
        row = registry.ledger.rows("programs", "name = ?", ("echo",))[0]
        fields = {k: row[k] for k in row if k != "seq"}
        registry.ledger.append(db, "programs", {**fields, "name": "../escaped"})
    with pytest.raises(InvalidName, match="escaped"):
        registry.export_files("../escaped", "1")


def test_a_request_with_a_number_for_its_program_id_is_refused_not_allocated() -> None:
    import msgpack

    body = [1, "echo", "1", 1 << 40, "VERIFIED", "TRUSTED", "r", 0, bytes(32)]
    with pytest.raises(ValueError, match="field"):
        parse_request(REQUEST_TAG + msgpack.packb(body))
    with pytest.raises(ValueError, match="not a registry request"):
        parse_request(REQUEST_TAG + b"\xc1")


def test_a_chained_row_with_a_number_for_its_bytes_is_tampered_not_allocated(
    registry: Registry,
) -> None:
    registry.propose("echo", "1", ECHO, ECHO_VECTORS)
    row = registry.ledger.rows("programs", "name = ?", ("echo",))[0]
    fields = {k: row[k] for k in row if k != "seq"}
    with registry.ledger.transaction() as db:  # bytes(2**40) would be a terabyte
        registry.ledger.append(db, "programs", {**fields, "version": "2", "program_id": 1 << 40})
    with pytest.raises(LedgerTampered, match="does not parse"):
        registry.entry("echo", "2")
    db = registry.ledger.connection
    db.execute("DROP TRIGGER chain_no_update")
    db.execute("UPDATE chain SET prev_hash = ? WHERE seq = 2", (1 << 40,))
    assert not registry.verify_ledger().ok
