"""Linking and execution proofs as the engine offers them (seed §4 ``link_resolve``,
``request_proof``): the glue between sandboxes, the vault, the ledger and
:mod:`kforge.link` / :mod:`kforge.proofs`, which do the actual work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kforge.accounting import PROOF_TICKS_PER_TICK
from kforge.core import AgentId, Hash256, InvalidState, VaultFetchFailed
from kforge.engine.context import EngineContext
from kforge.engine.jobs import (
    STARLARK,
    BuiltProgram,
    ProgramText,
    build_program,
    program_text,
    prove_run,
)
from kforge.engine.models import SandboxState
from kforge.engine.offload import Offload
from kforge.engine.policy import Action
from kforge.engine.records import ProgramLinked, ProofGenerated
from kforge.engine.sandbox import Sandbox
from kforge.engine.sandboxes import Sandboxes, link_off_loop
from kforge.isa import DEFAULT_GRANTS
from kforge.link import Import, link_cost
from kforge.machine import Delivery
from kforge.messages.payloads import ProofResult
from kforge.program import ForgeProgram
from kforge.proofs import DEFAULT_SAMPLE_INTERVAL, ExecutionProof, Signer
from kforge.proofs.keys import NodeKey
from kforge.proofs.proof import sign_proof
from kforge.proofs.replay import RunRecord
from kforge.sources import DEFAULT_STARLARK_MEMORY, gather_libraries
from kforge.tiers import TierRunner

__all__ = [
    "PROVABLE",
    "Artifacts",
    "ProofJob",
    "derived_signer",
    "proof_result",
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


def run_record(
    sandbox: Sandbox, program: ForgeProgram, message_limit: int, deliveries: Sequence[Delivery]
) -> RunRecord:
    """What determines the sandbox's run: its creation parameters and its delivery log."""
    request = sandbox.request
    return RunRecord.create(
        program,
        input=request.input,
        environment=request.environment or {},
        grants=set(request.grants) - DEFAULT_GRANTS,
        memory_quota=request.memory_quota or 0,
        tick_budget=request.tick_budget or 0,
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


async def run_proof_job(
    job: ProofJob, signer: Signer, tier: TierRunner, offload: Offload
) -> ExecutionProof:
    """Replay the run away from the event loop (:mod:`kforge.engine.offload`: a worker
    process under a time limit, inline for a short run) and sign the proof here."""
    raw = await offload.run(
        job.requester,
        f"the proof of sandbox {job.sandbox.id}",
        job.sandbox.ticks_used,
        prove_run,
        job.program.encoded,
        job.record.to_bytes(),
        signer.public_raw,
        tier.name,
        DEFAULT_SAMPLE_INTERVAL,
    )
    return sign_proof(ExecutionProof.from_bytes(raw), signer)


def proof_result(proof: ExecutionProof, *, whole: bool = True) -> ProofResult:
    """The PROOF_RESULT payload: the seed's fields, and (``whole``) the whole proof for
    verifiers."""
    return ProofResult(
        proof.program,
        proof.input,
        proof.output,
        proof.ticks_used,
        proof.trace_hash,
        proof.forge_sig,
        proof.to_bytes() if whole else msgspec.UNSET,
    )


async def build_upload(
    offload: Offload,
    requester: AgentId,
    kind: str,
    source: bytes | str,
    filename: str,
    memory_quota: int = DEFAULT_STARLARK_MEMORY,
    libraries: Mapping[bytes, bytes | None] | None = None,
) -> BuiltProgram:
    """Build an upload with ``offload``: assembly or FRGP bytes (inline when small),
    Starlark (``libraries`` are what it may load by content id) always in a worker
    process under the time limit, since its cost does not follow its size."""
    if kind == STARLARK:
        return await offload.run(
            requester,
            f"compiling {filename}",
            len(source),
            build_program,
            kind,
            source,
            filename,
            memory_quota,
            libraries or {},
            inline=False,
        )
    return await offload.run(
        requester, f"building {filename}", len(source), build_program, kind, source, filename
    )


class Artifacts:
    """Linking and proofs as the engine offers them."""

    def __init__(
        self, ctx: EngineContext, sandboxes: Sandboxes, runner: TierRunner, signer: Signer
    ) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        self.runner = runner
        self.signer = signer

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId
    ) -> Hash256:
        """Link the program with ``imports`` (see :func:`kforge.link.link`); returns the new id.

        The linked program is stored in the vault; with accounting on the
        requester pays 2 ticks per import (a refused charge stores nothing).
        Publishes LINK_COMPLETED.  Raises what :func:`kforge.link.link` raises
        (``UnresolvedSymbol``, ``InvalidProgram``, ``VaultFetchFailed``) and
        ``InsufficientResources``.
        """
        ctx = self.ctx
        ctx.require_open()
        ctx.policy.authorize(Action.LINK, requester)
        linked = await link_off_loop(ctx, program_id, imports, requester)
        ctx.require_open()
        cost = link_cost(imports)
        if ctx.accounting and cost:
            ctx.ledger.charge_ticks(requester, cost, f"linking {len(imports)} imports")
        resolved = ctx.vault.put_program(linked)
        ctx.transitions.record(ProgramLinked(program_id, resolved, len(imports), requester))
        ctx.commit()
        return resolved

    async def build_program(
        self,
        kind: str,
        source: bytes | str,
        filename: str,
        requester: AgentId,
        memory_quota: int = DEFAULT_STARLARK_MEMORY,
    ) -> tuple[Hash256, BuiltProgram]:
        """Build a program from an upload (``jobs.ASSEMBLY`` text, ``jobs.FRGP`` bytes or
        ``jobs.STARLARK`` source, compiled for ``memory_quota`` bytes) away from the event
        loop and store it; its id and what the reply tells of it.  Starlark always
        compiles in a worker process, under the time limit (its cost does not follow
        its size); the libraries it loads by content id come from the vault."""
        ctx = self.ctx
        ctx.policy.authorize(Action.PUT_PROGRAM, requester)
        libraries = self.starlark_libraries(source) if kind == STARLARK else {}
        built = await build_upload(
            ctx.offload, requester, kind, source, filename, memory_quota, libraries
        )
        return ctx.vault.put(built.encoded), built

    def starlark_libraries(self, source: bytes | str) -> dict[bytes, bytes | None]:
        """The vault objects Starlark ``source`` may load by content id (by raw id)."""
        vault = self.ctx.vault

        def fetch(object_id: bytes) -> bytes | None:
            try:
                return vault.get(Hash256(object_id))
            except VaultFetchFailed:  # absent or damaged: the compile says it cannot load it
                return None

        text = source if isinstance(source, str) else source.decode("utf-8", "replace")
        return gather_libraries(text, fetch)

    async def program_text(self, program_id: Hash256, requester: AgentId) -> ProgramText:
        """A stored program's disassembly, made away from the event loop."""
        ctx = self.ctx
        ctx.policy.authorize(Action.READ_PROGRAM, requester)
        encoded = ctx.vault.get(program_id)
        return await ctx.offload.run(
            requester, f"disassembling {program_id}", len(encoded), program_text, encoded
        )

    async def run_record(self, sandbox_id: Hash256, requester: AgentId) -> RunRecord:
        """What determines the sandbox's run (for replay and for verifying its proof)."""
        sandbox = self.sandboxes.authorized(sandbox_id, requester, Action.READ_RUN_RECORD)
        return self._record(sandbox)

    def _record(self, sandbox: Sandbox) -> RunRecord:
        ctx = self.ctx
        program = ctx.programs.load(sandbox.program)
        deliveries = ctx.state.run_logs(sandbox).deliveries
        return run_record(sandbox, program, ctx.limits.message_limit, deliveries)

    def prepare_proof(self, sandbox_id: Hash256, requester: AgentId) -> ProofJob:
        """Check and charge a proof request (raises at once); generation comes later."""
        ctx = self.ctx
        ctx.require_open()
        sandbox = self.sandboxes.authorized(sandbox_id, requester, Action.REQUEST_PROOF)
        if sandbox.state not in PROVABLE:
            raise InvalidState(sandbox.state, "request_proof (only a halted or faulted run)")
        record = self._record(sandbox)
        program = ctx.programs.load(sandbox.program)
        cost = ProofJob.cost_of(sandbox.ticks_used) if ctx.accounting else 0
        if cost:
            ctx.ledger.charge_ticks(requester, cost, f"a proof of sandbox {sandbox_id}")
        return ProofJob(sandbox, requester, program, record, cost)

    async def prove(self, job: ProofJob) -> ExecutionProof:
        """Generate and sign the proof of a prepared job (refunding it if that fails)."""
        try:
            proof = await run_proof_job(job, self.signer, self.runner, self.ctx.offload)
        except BaseException:
            if job.cost:
                self.ctx.ledger.refund_ticks(job.requester, job.cost)
            raise
        self.ctx.transitions.record(
            ProofGenerated(job.sandbox.id, job.sandbox.owner, proof_result(proof, whole=False))
        )
        self.ctx.commit()
        return proof
