"""Linking and execution proofs as the engine offers them (seed §4 ``link_resolve``,
``request_proof``): the glue between sandboxes, the vault, the ledger and
:mod:`kforge.link` / :mod:`kforge.proofs`, which do the actual work.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kforge.accounting import PROOF_TICKS_PER_TICK, Ledger
from kforge.core import AgentId, Hash256
from kforge.engine.models import SandboxState
from kforge.engine.sandbox import Sandbox
from kforge.isa import DEFAULT_GRANTS
from kforge.link import Import, link, link_cost
from kforge.program import ForgeProgram
from kforge.proofs import ExecutionProof, Signer, generate_proof
from kforge.proofs.keys import NodeKey
from kforge.proofs.replay import RunRecord
from kforge.storage import ProgramCache, Vault
from kforge.tiers import TierRunner

__all__ = [
    "PROVABLE",
    "ProofJob",
    "derived_signer",
    "link_program",
    "proof_event_payload",
    "proof_result_values",
    "run_proof_job",
    "run_record",
]

_KEY_DOMAIN: Final = b"kforge/node-key/v1\0"
#: The outcomes a proof can attest: a replay reaches them from the record alone.
PROVABLE: Final = (SandboxState.HALTED, SandboxState.FAULTED)


def derived_signer(secret: bytes) -> NodeKey:
    """An ed25519 key derived from the engine's secret (deterministic under a seeded source)."""
    seed = hashlib.sha256(_KEY_DOMAIN + secret).digest()
    return NodeKey(Ed25519PrivateKey.from_private_bytes(seed))


def link_program(
    programs: ProgramCache,
    vault: Vault,
    ledger: Ledger | None,
    program_id: Hash256,
    imports: Sequence[Import],
    requester: AgentId,
) -> Hash256:
    """Link ``program_id`` with ``imports``, store the result, charge 2 ticks per import.

    Raises what :func:`kforge.link.link` raises (``UnresolvedSymbol``,
    ``InvalidProgram``, ``VaultFetchFailed``) and ``InsufficientResources``; a
    refused charge stores nothing.
    """
    linked = link(programs.load(program_id), imports, programs.load)
    cost = link_cost(imports)
    if ledger is not None and cost:
        ledger.charge_ticks(requester, cost, f"linking {len(imports)} imports")
    return vault.put_program(linked)


def run_record(sandbox: Sandbox, program: ForgeProgram, message_limit: int) -> RunRecord:
    """What determines the sandbox's run: its creation parameters and its delivery log."""
    request = sandbox.request
    if sandbox.machine is not None:
        deliveries: Sequence[Any] = sandbox.machine.deliveries
    else:
        deliveries = sandbox.final.deliveries if sandbox.final is not None else ()
    return RunRecord.create(
        program,
        input=request.input,
        environment=request.environment,
        grants=set(request.grants) - DEFAULT_GRANTS,
        memory_quota=request.memory_quota,
        tick_budget=request.tick_budget,
        message_limit=message_limit,
        deliveries=deliveries,
    )


@dataclass(frozen=True, slots=True)
class ProofJob:
    """A checked, paid-for proof request, ready to generate."""

    sandbox: Sandbox
    requester: AgentId
    program: ForgeProgram
    record: RunRecord
    cost: int

    @staticmethod
    def cost_of(ticks_used: int) -> int:
        return PROOF_TICKS_PER_TICK * ticks_used


async def run_proof_job(job: ProofJob, signer: Signer, tier: TierRunner) -> ExecutionProof:
    """Replay the run in a worker thread (the event loop stays free) and sign the proof."""
    return await asyncio.to_thread(generate_proof, job.program, job.record, signer, tier=tier)


def proof_event_payload(proof: ExecutionProof) -> dict[str, Any]:
    """The PROOF_GENERATED payload: the seed's ``ExecutionProof`` fields."""
    return {
        "program": proof.program,
        "input": proof.input,
        "output": proof.output,
        "ticks_used": proof.ticks_used,
        "trace_hash": proof.trace_hash,
        "forge_sig": proof.forge_sig,
    }


def proof_result_values(proof: ExecutionProof) -> dict[str, Any]:
    """The PROOF_RESULT payload: the seed's fields plus the whole proof for verifiers."""
    return {**proof_event_payload(proof), "proof": proof.to_bytes()}
