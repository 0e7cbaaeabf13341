"""The ``Registry``: propose, verify through the gates, promote, revoke, and refuse to run.

Status is never stored: it is the ``to_status`` of an entry's last promotion-log
row.  Every status change is a signed :class:`StatusRequest`; the gates' own
transitions (PROPOSED → BUILT → VERIFIED) are signed by the node key, promotion
to TRUSTED and revocation by an agent the policy allows.  :meth:`check_runnable`
is what an engine that runs only TRUSTED programs calls at every sandbox
creation: it re-reads the ledger, re-checks the rows' hashes, the promotion's
signature and the container's hash against the program id.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kforge.core import AgentId, ForgeError, Hash256
from kforge.program import ForgeProgram, decode_program
from kforge.proofs import generate_proof
from kforge.proofs.keys import NodeKey, load_or_create_key
from kforge.registry.errors import (
    InvalidTransition,
    LedgerTampered,
    ProgramNotTrusted,
    ProgramRevoked,
    PromotionRefused,
    UnknownProgram,
)
from kforge.registry.gates import (
    ProofBundle,
    Prover,
    decode_gate,
    decode_source,
    policy_gate,
    proof_gate,
    static_gate,
    vectors_gate,
)
from kforge.registry.ledger import Ledger, LedgerCheck, as_blob
from kforge.registry.model import (
    GATE_ORDER,
    FailureKind,
    Gate,
    GateFailure,
    GateResult,
    Manifest,
    Status,
    VerifyOutcome,
    check_name,
    parse_vectors,
)
from kforge.registry.policy import RegistryPolicy
from kforge.registry.signing import StatusRequest, parse_request, signature_valid
from kforge.sources import is_starlark_name

__all__ = ["LEDGER_FILE_NAME", "Entry", "LogRecord", "Registry", "TrustPolicy"]

LEDGER_FILE_NAME = "registry.sqlite3"
_FORWARD = {Status.PROPOSED: Status.BUILT, Status.BUILT: Status.VERIFIED}


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One proposal in the ledger: a name and version bound to a program id."""

    seq: int
    name: str
    version: str
    program_id: Hash256 | None
    source_hash: Hash256
    vectors_hash: Hash256
    manifest: Manifest
    proposer: AgentId
    created_ms: int

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One row of the promotion log: who moved which entry from what to what, when, why."""

    seq: int
    entry: str
    from_status: str | None
    to_status: str
    agent: str
    reason: str
    at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "entry": self.entry,
            "from": self.from_status,
            "to": self.to_status,
            "agent": self.agent,
            "reason": self.reason,
            "at_ms": self.at_ms,
        }


class Registry:
    """The program registry over one ledger file.  A context manager.

    ``node_key`` signs execution proofs and the gates' own transitions; ``clock``
    returns milliseconds (inject one in tests); ``prover`` makes proofs
    (``generate_proof`` unless a test injects another).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        node_key: NodeKey,
        policy: RegistryPolicy | None = None,
        clock: Callable[[], int] | None = None,
        prover: Prover | None = None,
        tier: str = "reference",
    ) -> None:
        self.ledger = Ledger(path)
        self.node_key = node_key
        self.policy = policy or RegistryPolicy()
        self.clock = clock or _system_clock
        self.prover: Prover = prover or generate_proof
        self.tier = tier

    @classmethod
    def open(
        cls,
        data_dir: str | Path | None = None,
        *,
        policy: RegistryPolicy | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Registry:
        """The registry in ``data_dir`` (``registry.sqlite3``), signed with the node key there."""
        key = load_or_create_key(data_dir)
        from kforge.storage import default_data_dir

        folder = Path(data_dir) if data_dir is not None else default_data_dir()
        return cls(folder / LEDGER_FILE_NAME, node_key=key, policy=policy, clock=clock)

    # ------------------------------------------------------------------ reading

    def entry(self, name: str, version: str) -> Entry:
        """The entry for ``name@version`` (its row checked against the chain)."""
        rows = self.ledger.rows("programs", "name = ? AND version = ?", (name, version))
        if not rows:
            raise UnknownProgram(f"{name}@{version}")
        return _entry(rows[0])

    def entries(self) -> list[Entry]:
        return [_entry(row) for row in self.ledger.rows("programs", "1", ())]

    def status(self, name: str, version: str) -> Status:
        return self._status(self.entry(name, version))

    def _status(self, entry: Entry) -> Status:
        rows = self._promotions(entry)
        return Status(rows[-1]["to_status"])

    def _promotions(self, entry: Entry) -> list[dict[str, Any]]:
        return self.ledger.rows("promotions", "program_seq = ?", (entry.seq,))

    def log(self, name: str | None = None, version: str | None = None) -> list[LogRecord]:
        """The promotion log, oldest first: of one entry, or of the whole ledger."""
        entries = {e.seq: e for e in self.entries()}
        if name is not None:
            wanted = self.entry(name, version or "")
            rows = self._promotions(wanted)
        else:
            rows = self.ledger.rows("promotions", "1", ())
        return [
            LogRecord(
                seq=int(row["seq"]),
                entry=entries[int(row["program_seq"])].label,
                from_status=row["from_status"],
                to_status=str(row["to_status"]),
                agent=as_blob(row["agent"]).hex(),
                reason=str(row["reason"]),
                at_ms=int(row["at_ms"]),
            )
            for row in rows
        ]

    def gate_results(self, name: str, version: str, attempt: int | None = None) -> list[GateResult]:
        """The gate results of one attempt (default: the latest), in gate order."""
        entry = self.entry(name, version)
        rows = self.ledger.rows("gate_results", "program_seq = ?", (entry.seq,))
        if not rows:
            return []
        wanted = attempt if attempt is not None else max(int(r["attempt"]) for r in rows)
        results = []
        for row in rows:
            if int(row["attempt"]) != wanted:
                continue
            results.append(self._gate_result(row))
        return results

    def _gate_result(self, row: dict[str, Any]) -> GateResult:
        """One gate result row and its report; ``LedgerTampered`` when they do not parse."""
        try:
            return _gate_result(json.loads(self.artifact(Hash256(as_blob(row["report_hash"])))))
        except (ValueError, TypeError, KeyError) as error:
            raise _unreadable("gate_results", row, error) from None

    def artifact(self, digest: Hash256) -> bytes:
        """An artifact's bytes; ``LedgerTampered`` when they no longer match the hash."""
        return self.ledger.get_artifact(digest)[1]

    def program(self, name: str, version: str) -> ForgeProgram:
        """The entry's program, decoded from its stored container."""
        entry = self.entry(name, version)
        if entry.program_id is None:
            raise UnknownProgram(f"{entry.label} has no program (it never decoded)")
        return decode_program(self.artifact(entry.program_id))

    def proof_bundles(self, name: str, version: str) -> dict[str, bytes]:
        """Vector name → proof bundle (``kforge verify`` format) of the latest test gate."""
        bundles: dict[str, bytes] = {}
        for result in self.gate_results(name, version):
            if result.gate is Gate.TEST:
                for run in result.report.get("vectors", []):
                    if run.get("proof"):
                        bundles[run["vector"]] = self.artifact(Hash256.from_hex(run["proof"]))
        return bundles

    def export_files(self, name: str, version: str) -> dict[str, bytes]:
        """File name → bytes of an export: ``NAME-VERSION.frgp`` and a proof bundle per vector.

        Every name that goes into a file name is checked against the naming rule
        here, as read from the ledger (a ledger written by hand may hold any name),
        so a file name is never a path.
        """
        stem = f"{check_name('program name', name)}-{check_name('version', version)}"
        files = {f"{stem}.frgp": self.program(name, version).encoded}
        for vector, bundle in sorted(self.proof_bundles(name, version).items()):
            files[f"{stem}.{check_name('test vector name', vector)}.proof"] = bundle
        return files

    def show(self, name: str, version: str) -> dict[str, Any]:
        """Everything the ledger holds about one entry, as JSON-able data."""
        entry = self.entry(name, version)
        return {
            "name": entry.name,
            "version": entry.version,
            "program_id": None if entry.program_id is None else entry.program_id.hex,
            "status": self._status(entry).value,
            "manifest": entry.manifest.to_json(),
            "proposer": entry.proposer.hex,
            "source": entry.source_hash.hex,
            "vectors": entry.vectors_hash.hex,
            "gates": [r.to_json() for r in self.gate_results(name, version)],
            "log": [r.to_json() for r in self.log(name, version)],
        }

    def verify_ledger(self) -> LedgerCheck:
        """Walk the whole hash chain and every artifact (see :meth:`Ledger.verify`), then
        every promotion row's signed request and its signer's authority."""
        check = self.ledger.verify()
        if not check.ok:  # rows that do not match the chain are not read any further
            return check
        problems = [
            problem
            for entry in self.entries()
            for row in self._promotions(entry)
            for problem in self._promotion_problems(entry, row)
        ]
        return dataclasses.replace(check, ok=not problems, problems=tuple(problems))

    # ------------------------------------------------------------------ proposing

    def propose(
        self,
        name: str,
        version: str,
        source: bytes,
        vectors: bytes,
        manifest: Manifest | None = None,
        *,
        filename: str = "<source>",
        proposer: NodeKey | None = None,
        reason: str = "proposed",
    ) -> Entry:
        """Record a proposal: source, test vectors and manifest as artifacts; status PROPOSED.

        The vectors must parse (``VectorFormatError``); the source need not decode
        (the decode gate will say why).  ``name@version`` may be proposed once.
        """
        check_name("program name", name)
        check_name("version", version)
        manifest = manifest or Manifest()
        if is_starlark_name(filename) and not manifest.language:
            manifest = dataclasses.replace(manifest, language="starlark")
        parse_vectors(vectors, f"{name}@{version} vectors")
        try:
            program: ForgeProgram | None = decode_source(source, filename, manifest.memory_quota)
        except (ForgeError, UnicodeDecodeError):  # the decode gate will report why
            program = None
        key = proposer or self.node_key
        now = self.clock()
        with self.ledger.transaction() as db:
            known = db.execute(
                "SELECT 1 FROM programs WHERE name = ? AND version = ?", (name, version)
            ).fetchone()
            if known is not None:
                raise InvalidTransition(
                    f"{name}@{version}", "PROPOSED", "PROPOSED", "already proposed"
                )
            source_hash = self.ledger.put_artifact(db, "source", source)
            vectors_hash = self.ledger.put_artifact(db, "vectors", vectors)
            program_id = None
            if program is not None:
                program_id = self.ledger.put_artifact(db, "container", program.encoded).raw
            seq = self.ledger.append(
                db,
                "programs",
                {
                    "name": name,
                    "version": version,
                    "program_id": program_id,
                    "source_hash": source_hash.raw,
                    "vectors_hash": vectors_hash.raw,
                    "manifest": json.dumps(manifest.to_json(), sort_keys=True),
                    "proposer": key.public_raw,
                    "created_ms": now,
                },
            )
            request = StatusRequest(
                name,
                version,
                program_id or b"",
                "",
                Status.PROPOSED.value,
                reason,
                now,
                AgentId(key.public_raw),
            )
            self._append_promotion(db, seq, None, request, request.sign(key))
        return self.entry(name, version)

    def _append_promotion(
        self,
        db: Any,
        program_seq: int,
        from_status: Status | None,
        request: StatusRequest,
        signature: bytes,
    ) -> None:
        self.ledger.append(
            db,
            "promotions",
            {
                "program_seq": program_seq,
                "from_status": None if from_status is None else from_status.value,
                "to_status": request.to_status,
                "agent": request.agent.raw,
                "reason": request.reason,
                "at_ms": request.timestamp_ms,
                "request": request.canonical_bytes(),
                "signature": signature,
            },
        )

    # ------------------------------------------------------------------ verifying

    def verify(self, name: str, version: str) -> VerifyOutcome:
        """Run every gate (decode, static, policy, test, proof) and record each result.

        Allowed from PROPOSED and BUILT.  The decode gate moves PROPOSED to BUILT,
        all gates green move BUILT to VERIFIED; a failure leaves the status and
        returns the classified failures.  Later gates are not run after a failed
        decode, nor tests after a failed static or policy gate.
        """
        entry = self.entry(name, version)
        status = self._status(entry)
        if status not in _FORWARD:
            raise InvalidTransition(
                entry.label,
                status.value,
                Status.VERIFIED.value,
                "only PROPOSED or BUILT programs are verified",
            )
        source = self.artifact(entry.source_hash)
        vectors = parse_vectors(self.artifact(entry.vectors_hash), f"{entry.label} vectors")
        pending: list[tuple[str, bytes]] = []

        def store(kind: str, data: bytes) -> Hash256:
            pending.append((kind, data))
            return Hash256.of(data)

        results = self._run_gates(entry, source, vectors, store)
        return self._record_attempt(entry, status, results, pending)

    def _run_gates(
        self,
        entry: Entry,
        source: bytes,
        vectors: Any,
        store: Callable[[str, bytes], Hash256],
    ) -> list[GateResult]:
        decoded, program = decode_gate(
            source, f"{entry.label}:{entry.manifest.source_name}", entry.manifest.memory_quota
        )
        if program is not None and (
            entry.program_id is None or program.program_id != entry.program_id
        ):
            failure = GateFailure(
                FailureKind.DECODE,
                f"program id {program.program_id} differs from the proposed {entry.program_id}",
                {"proposed": None if entry.program_id is None else entry.program_id.hex},
            )
            decoded = GateResult(Gate.DECODE, False, decoded.report, (failure,))
        results = [decoded]
        if not decoded.passed or program is None:
            return results
        results.append(static_gate(program, entry.manifest, vectors, self.policy))
        results.append(policy_gate(entry.manifest, self.policy))
        if not all(result.passed for result in results):
            return results
        tested, bundles = vectors_gate(
            program, entry.manifest, vectors, self.node_key, self.prover, store, tier=self.tier
        )
        results.append(tested)
        results.append(self._proof_gate(program, bundles))
        return results

    def _proof_gate(self, program: ForgeProgram, bundles: list[ProofBundle]) -> GateResult:
        return proof_gate(program, bundles, self.node_key.public_raw, tier=self.tier)

    def _record_attempt(
        self,
        entry: Entry,
        status: Status,
        results: list[GateResult],
        pending: list[tuple[str, bytes]],
    ) -> VerifyOutcome:
        now = self.clock()
        with self.ledger.transaction() as db:
            # Re-read under the write lock: another verifier may have moved the entry.
            current = Status(
                db.execute(
                    "SELECT to_status FROM promotions WHERE program_seq = ? ORDER BY seq DESC LIMIT 1",
                    (entry.seq,),
                ).fetchone()[0]
            )
            if current is not status:
                raise InvalidTransition(
                    entry.label, current.value, "VERIFIED", "status changed meanwhile"
                )
            attempt = 1 + int(
                db.execute(
                    "SELECT COALESCE(MAX(attempt), 0) FROM gate_results WHERE program_seq = ?",
                    (entry.seq,),
                ).fetchone()[0]
            )
            for kind, data in pending:
                self.ledger.put_artifact(db, kind, data)
            for result in results:
                report = json.dumps(result.to_json(), sort_keys=True).encode()
                report_hash = self.ledger.put_artifact(db, "report", report)
                self.ledger.append(
                    db,
                    "gate_results",
                    {
                        "program_seq": entry.seq,
                        "attempt": attempt,
                        "gate": result.gate.value,
                        "passed": int(result.passed),
                        "failure_kind": result.failures[0].kind.value if result.failures else None,
                        "report_hash": report_hash.raw,
                        "at_ms": now,
                    },
                )
            passed = len(results) == len(GATE_ORDER) and all(r.passed for r in results)
            moves = []
            if status is Status.PROPOSED and results[0].passed:
                moves.append((Status.PROPOSED, Status.BUILT, "decode gate passed"))
            if passed:
                moves.append(
                    (Status.BUILT, Status.VERIFIED, f"all gates passed (attempt {attempt})")
                )
            for before, after, reason in moves:
                request = self._node_request(entry, before, after, reason, now)
                self._append_promotion(db, entry.seq, before, request, request.sign(self.node_key))
                status = after
        return VerifyOutcome(
            entry.name,
            entry.version,
            None if entry.program_id is None else entry.program_id.hex,
            attempt,
            status,
            tuple(results),
        )

    def _node_request(
        self, entry: Entry, before: Status, after: Status, reason: str, now: int
    ) -> StatusRequest:
        return StatusRequest(
            entry.name,
            entry.version,
            b"" if entry.program_id is None else entry.program_id.raw,
            before.value,
            after.value,
            reason,
            now,
            AgentId(self.node_key.public_raw),
        )

    # ------------------------------------------------------------------ promoting

    def request(
        self, name: str, version: str, to: Status, reason: str, agent_key: NodeKey
    ) -> tuple[StatusRequest, bytes]:
        """A signed request by ``agent_key`` to move ``name@version`` from its status to ``to``."""
        entry = self.entry(name, version)
        request = StatusRequest(
            name,
            version,
            b"" if entry.program_id is None else entry.program_id.raw,
            self._status(entry).value,
            to.value,
            reason,
            self.clock(),
            AgentId(agent_key.public_raw),
        )
        return request, request.sign(agent_key)

    def promote(self, request: StatusRequest, signature: bytes) -> Status:
        """Apply a signed request to TRUSTED or REVOKED; returns the new status.

        Refused (``PromotionRefused``) for a bad signature, an agent the policy
        does not allow, a request for another program id, a stale timestamp, or
        — for TRUSTED — any gate of the latest attempt that is not green;
        ``InvalidTransition`` when the request's ``from`` is not the current
        status or the lifecycle does not allow the step (REVOKED is final).
        """
        entry = self.entry(request.name, request.version)
        label = entry.label
        wanted = _status_named(request.to_status, label)
        if wanted not in (Status.TRUSTED, Status.REVOKED):
            raise InvalidTransition(
                label,
                request.from_status,
                request.to_status,
                "only the gates move programs to BUILT or VERIFIED",
            )
        if not signature_valid(request, signature):
            raise PromotionRefused(
                label, "the request's signature does not verify", {"agent": request.agent.hex}
            )
        if request.agent not in self.policy.promoters:
            raise PromotionRefused(
                label,
                f"agent {request.agent.hex} may not promote or revoke under this policy",
                {"agent": request.agent.hex},
            )
        expected_id = b"" if entry.program_id is None else entry.program_id.raw
        if request.program_id != expected_id:
            raise PromotionRefused(
                label,
                "the request names another program id",
                {"requested": request.program_id.hex()},
            )
        age_ms = abs(self.clock() - request.timestamp_ms)
        if age_ms > self.policy.request_max_age_seconds * 1000:
            raise PromotionRefused(
                label, f"the request is {age_ms} ms old (stale or from the future)"
            )
        current = self._status(entry)
        if current is Status.REVOKED:
            raise InvalidTransition(label, current.value, wanted.value, "REVOKED is final")
        if request.from_status != current.value:
            raise InvalidTransition(
                label, current.value, wanted.value, f"the request says it is {request.from_status}"
            )
        if wanted is Status.TRUSTED:
            self._require_green(entry)
            if current is not Status.VERIFIED:
                raise InvalidTransition(
                    label, current.value, wanted.value, "only VERIFIED programs are promoted"
                )
        with self.ledger.transaction() as db:
            latest = db.execute(
                "SELECT to_status FROM promotions WHERE program_seq = ? ORDER BY seq DESC LIMIT 1",
                (entry.seq,),
            ).fetchone()[0]
            if latest != current.value:
                raise InvalidTransition(
                    label, str(latest), wanted.value, "status changed meanwhile"
                )
            self._append_promotion(db, entry.seq, current, request, signature)
        return wanted

    def _require_green(self, entry: Entry) -> None:
        results = {r.gate: r for r in self.gate_results(entry.name, entry.version)}
        not_green = {
            gate.value: ("not run" if gate not in results else "failed")
            for gate in GATE_ORDER
            if gate not in results or not results[gate].passed
        }
        if not_green:
            summary = ", ".join(f"{gate} {state}" for gate, state in not_green.items())
            failures = [f.to_json() for r in results.values() for f in r.failures]
            raise PromotionRefused(
                entry.label,
                f"gates not green: {summary}",
                {"gates": not_green, "failures": failures},
            )

    def revoke(self, request: StatusRequest, signature: bytes) -> Status:
        """Apply a signed request to REVOKED (same checks as :meth:`promote`)."""
        if request.to_status != Status.REVOKED.value:
            raise InvalidTransition(
                f"{request.name}@{request.version}",
                request.from_status,
                request.to_status,
                "not a revocation",
            )
        return self.promote(request, signature)

    # ------------------------------------------------------------------ running

    def check_runnable(self, program_id: Hash256) -> None:
        """Raise unless ``program_id`` is TRUSTED in the ledger right now.

        ``ProgramRevoked`` (naming who revoked it, when and why) when any entry
        for the id was revoked; ``ProgramNotTrusted`` when none is TRUSTED;
        ``LedgerTampered`` when a row, the promotion's signature or the stored
        container no longer matches what was promoted.
        """
        rows = self.ledger.rows("programs", "program_id = ?", (program_id.raw,))
        if not rows:
            raise ProgramNotTrusted(program_id, "not in the registry")
        entries = [_entry(row) for row in rows]
        trusted: list[tuple[Entry, dict[str, Any]]] = []
        statuses: list[str] = []
        for entry in entries:
            log = self._promotions(entry)
            last = log[-1]
            statuses.append(f"{entry.label} {last['to_status']}")
            if last["to_status"] == Status.REVOKED.value:
                raise ProgramRevoked(
                    program_id,
                    entry.label,
                    as_blob(last["agent"]).hex(),
                    int(last["at_ms"]),
                    str(last["reason"]),
                )
            if last["to_status"] == Status.TRUSTED.value:
                trusted.append((entry, last))
        if not trusted:
            raise ProgramNotTrusted(program_id, ", ".join(statuses))
        problems = [p for entry, row in trusted for p in self._promotion_problems(entry, row)]
        if problems:
            raise LedgerTampered(problems)
        self.artifact(program_id)  # the container still hashes to the promoted id

    def _promotion_problems(self, entry: Entry, row: dict[str, Any]) -> list[str]:
        """What is wrong with one promotion row: its request, its signature, its signer.

        The row must say what the request its agent signed says, and a move to
        TRUSTED or REVOKED must be signed by a promoter of this registry's policy:
        anyone can sign a request with a key of their own, and anyone who can write
        the ledger file can chain a row to it.
        """
        where = f"promotions row {row['seq']}"
        try:
            request = parse_request(as_blob(row["request"]))
        except (ValueError, TypeError) as error:
            return [f"{where}: the signed request does not parse ({error})"]
        problems = []
        if not signature_valid(request, as_blob(row["signature"])):
            problems.append(f"{where}: request does not match its signature")
        program_id = b"" if entry.program_id is None else entry.program_id.raw
        signed = (request.name, request.version, request.program_id, request.to_status)
        stored = (entry.name, entry.version, program_id, row["to_status"])
        if signed != stored or request.agent.raw != as_blob(row["agent"]):
            problems.append(f"{where}: the row does not say what its signed request says")
        moves_trust = request.to_status in (Status.TRUSTED.value, Status.REVOKED.value)
        if moves_trust and request.agent not in self.policy.promoters:
            problems.append(
                f"{where}: {request.from_status} -> {request.to_status} is signed by "
                f"{request.agent.hex}, who is not a promoter under this policy"
            )
        return problems

    def trusted_program(self, program_id: Hash256) -> ForgeProgram:
        """The TRUSTED program stored under ``program_id`` (a ``kforge.link`` ``Fetch``)."""
        self.check_runnable(program_id)
        return decode_program(self.artifact(program_id))

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self.ledger.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrustPolicy:
    """What an engine asks at every sandbox creation: may this program id run?

    With ``trusted_only`` (the default) only TRUSTED programs may; without, any
    program not REVOKED in the registry may (unknown ids included).
    """

    def __init__(self, registry: Registry, *, trusted_only: bool = True) -> None:
        self.registry = registry
        self.trusted_only = trusted_only

    def check_runnable(self, program_id: Hash256) -> None:
        """Return when the program may run; raise ``ProgramNotTrusted``/``ProgramRevoked``."""
        try:
            self.registry.check_runnable(program_id)
        except ProgramRevoked:
            raise
        except ProgramNotTrusted:
            if self.trusted_only:
                raise


def _status_named(text: str, label: str) -> Status:
    try:
        return Status(text)
    except ValueError:
        raise InvalidTransition(label, "?", text, "no such status") from None


def _unreadable(kind: str, row: dict[str, Any], error: Exception) -> LedgerTampered:
    """A row that matches the chain but does not parse: someone chained it by hand."""
    return LedgerTampered([f"{kind} row {row['seq']} does not parse ({type(error).__name__})"])


def _entry(row: dict[str, Any]) -> Entry:
    try:
        return _parse_entry(row)
    except (ValueError, TypeError, KeyError) as error:
        raise _unreadable("programs", row, error) from None


def _parse_entry(row: dict[str, Any]) -> Entry:
    program_id = row["program_id"]
    return Entry(
        seq=int(row["seq"]),
        name=str(row["name"]),
        version=str(row["version"]),
        program_id=None if program_id is None else Hash256(as_blob(program_id)),
        source_hash=Hash256(as_blob(row["source_hash"])),
        vectors_hash=Hash256(as_blob(row["vectors_hash"])),
        manifest=Manifest.from_json(json.loads(row["manifest"])),
        proposer=AgentId(as_blob(row["proposer"])),
        created_ms=int(row["created_ms"]),
    )


def _gate_result(body: dict[str, Any]) -> GateResult:
    return GateResult(
        Gate(body["gate"]),
        bool(body["passed"]),
        body["report"],
        tuple(
            GateFailure(FailureKind(f["kind"]), f["message"], f["facts"]) for f in body["failures"]
        ),
    )
