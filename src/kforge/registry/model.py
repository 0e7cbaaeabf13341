"""What the registry records: statuses, gates, proposals, test vectors and gate results.

Everything here is plain immutable data with a JSON form (``to_json``), so a
report can be stored as an artifact and handed back to an agent unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from kforge.isa import DEFAULT_GRANTS, GRANTABLE_CHANNELS, WORD_MASK
from kforge.registry.errors import InvalidName, VectorFormatError

__all__ = [
    "GATE_ORDER",
    "FailureKind",
    "Gate",
    "GateFailure",
    "GateResult",
    "Manifest",
    "Status",
    "TestVector",
    "VerifyOutcome",
    "check_name",
    "parse_vectors",
]

#: What a program name, a version and a test vector name may be.  Each becomes part
#: of a file name on export, so no path separator, no leading dot (``..``), no
#: control character and no length past a file system's can ever be part of one.
NAME_RULE: Final = "1 to 128 of A-Z a-z 0-9 . _ + -, not starting with '.' or '-'"
_NAME: Final = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,127}")


def check_name(what: str, name: str) -> str:
    """``name`` when it follows :data:`NAME_RULE`, else ``InvalidName``."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidName(what, str(name), NAME_RULE)
    return name


class Status(Enum):
    """The lifecycle of a registered program, derived from the promotion log."""

    PROPOSED = "PROPOSED"  # recorded; no gate has passed yet
    BUILT = "BUILT"  # the decode gate passed: the container is canonical
    VERIFIED = "VERIFIED"  # every gate passed in one attempt
    TRUSTED = "TRUSTED"  # promoted by a signed request of an allowed agent
    REVOKED = "REVOKED"  # withdrawn by a signed request; final


class Gate(Enum):
    """The gates of verification, run in :data:`GATE_ORDER`."""

    DECODE = "decode"  # the container decodes strictly and canonically
    STATIC = "static"  # targets in range, known opcodes, channels, declared bounds
    POLICY = "policy"  # grants and quotas within the policy
    TEST = "test"  # every test vector gives its expected result within its bounds
    PROOF = "proof"  # every signed execution proof re-verifies by replay


GATE_ORDER: Final = (Gate.DECODE, Gate.STATIC, Gate.POLICY, Gate.TEST, Gate.PROOF)


class FailureKind(Enum):
    """Why a gate failed: one class per gate."""

    DECODE = "decode"
    STATIC = "static"
    POLICY = "policy"
    TEST = "test"
    PROOF = "proof"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a proposal asks for: extra channels (3..7) and the declared bounds."""

    grants: tuple[int, ...] = ()
    tick_budget: int = 1_000_000
    memory_quota: int = 65_536
    #: What the source is: "starlark" for Starlark source (compiled for ``memory_quota``),
    #: "" for FRGP bytes or assembly text (told apart by the magic).
    language: str = ""

    def __post_init__(self) -> None:
        bad = [c for c in self.grants if c not in GRANTABLE_CHANNELS]
        if bad:
            raise ValueError(f"channel {bad[0]} cannot be granted (only 3..7)")
        if not 0 < self.tick_budget <= WORD_MASK or not 0 < self.memory_quota <= 1 << 32:
            raise ValueError("tick budget and memory quota must be positive and in range")
        if self.language not in ("", "starlark"):
            raise ValueError(f"unknown source language {self.language!r} (only 'starlark')")
        object.__setattr__(self, "grants", tuple(sorted(set(self.grants))))

    @property
    def channels(self) -> frozenset[int]:
        """Every channel a program of this proposal may use: defaults plus grants."""
        return frozenset(DEFAULT_GRANTS) | frozenset(self.grants)

    @property
    def source_name(self) -> str:
        """A file name that tells :func:`kforge.sources.program_from_source` the language."""
        return "source.star" if self.language == "starlark" else "source"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "grants": list(self.grants),
            "tick_budget": self.tick_budget,
            "memory_quota": self.memory_quota,
        }
        if self.language:
            body["language"] = self.language
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Manifest:
        return cls(
            grants=tuple(body.get("grants", ())),
            tick_budget=int(body.get("tick_budget", 1_000_000)),
            memory_quota=int(body.get("memory_quota", 65_536)),
            language=str(body.get("language", "")),
        )


@dataclass(frozen=True, slots=True)
class TestVector:
    """One test: stdin, the exact stdout expected and the final state.

    ``tick_budget`` and ``memory_quota`` default to the proposal's declared
    bounds; ``grants`` to none (the default channels only).
    """

    __test__ = False  # not a pytest class

    name: str
    input: bytes
    expected_output: bytes
    expected_state: str = "HALTED"
    tick_budget: int | None = None
    memory_quota: int | None = None
    grants: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_hex": self.input.hex(),
            "expected_output_hex": self.expected_output.hex(),
            "expected_state": self.expected_state,
            "ticks": self.tick_budget,
            "memory": self.memory_quota,
            "grants": list(self.grants),
        }


def _text_or_hex(entry: Mapping[str, Any], key: str, source: str, where: str) -> bytes:
    if f"{key}_hex" in entry:
        try:
            return bytes.fromhex(str(entry[f"{key}_hex"]))
        except ValueError:
            raise VectorFormatError(source, f"{where}: {key}_hex is not hex") from None
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise VectorFormatError(source, f"{where}: {key} must be a string")
    return value.encode("utf-8")


def _optional_int(entry: Mapping[str, Any], key: str, source: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise VectorFormatError(source, f"{where}: {key} must be a positive integer")
    return value


def parse_vectors(blob: bytes, source: str = "<vectors>") -> tuple[TestVector, ...]:
    """Test vectors from their JSON file (``NAME.vectors.json``; see docs/registry.md).

    The file is ``{"vectors": [{"name", "input" | "input_hex", "output" |
    "output_hex", "state", "ticks", "memory", "grants"}, ...]}``; only ``output``
    (or ``output_hex``) is required.  Raises ``VectorFormatError`` naming the entry.
    """
    try:
        body = json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise VectorFormatError(source, f"not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno}, column {error.colno}"
        raise VectorFormatError(source, f"not JSON: {where}: {error.msg}") from None
    entries = body.get("vectors") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise VectorFormatError(source, 'expected an object with a "vectors" list')
    vectors: list[TestVector] = []
    for index, entry in enumerate(entries):
        where = f"vector {index}"
        if not isinstance(entry, dict):
            raise VectorFormatError(source, f"{where}: expected an object")
        if "output" not in entry and "output_hex" not in entry:
            raise VectorFormatError(source, f"{where}: no expected output")
        grants = entry.get("grants", [])
        if not isinstance(grants, list) or any(
            not isinstance(c, int) or c not in GRANTABLE_CHANNELS for c in grants
        ):
            raise VectorFormatError(source, f"{where}: grants must be channels 3..7")
        state = str(entry.get("state", "HALTED")).upper()
        if state not in ("HALTED", "FAULTED", "BLOCKED"):
            raise VectorFormatError(source, f"{where}: state must be HALTED, FAULTED or BLOCKED")
        name = str(entry.get("name", f"vector-{index}"))
        if _NAME.fullmatch(name) is None:
            raise VectorFormatError(
                source, f"{where}: name {name[:80]!r} breaks the rule {NAME_RULE}"
            )
        vectors.append(
            TestVector(
                name=name,
                input=_text_or_hex(entry, "input", source, where),
                expected_output=_text_or_hex(entry, "output", source, where),
                expected_state=state,
                tick_budget=_optional_int(entry, "ticks", source, where),
                memory_quota=_optional_int(entry, "memory", source, where),
                grants=tuple(sorted(set(grants))),
            )
        )
    if not vectors:
        raise VectorFormatError(source, "no test vectors")
    return tuple(vectors)


@dataclass(frozen=True, slots=True)
class GateFailure:
    """One classified failure with the facts an agent needs to correct its program."""

    kind: FailureKind
    message: str
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message, "facts": dict(self.facts)}


@dataclass(frozen=True, slots=True)
class GateResult:
    """A gate's verdict and report (what it checked, and every failure)."""

    gate: Gate
    passed: bool
    report: Mapping[str, Any]
    failures: tuple[GateFailure, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.gate.value,
            "passed": self.passed,
            "report": dict(self.report),
            "failures": [failure.to_json() for failure in self.failures],
        }


@dataclass(frozen=True, slots=True)
class VerifyOutcome:
    """The result of one verification attempt, as returned to the proposing agent."""

    name: str
    version: str
    program_id: str | None
    attempt: int
    status: Status
    results: tuple[GateResult, ...]

    @property
    def passed(self) -> bool:
        return len(self.results) == len(GATE_ORDER) and all(r.passed for r in self.results)

    @property
    def failures(self) -> tuple[GateFailure, ...]:
        return tuple(failure for result in self.results for failure in result.failures)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "program_id": self.program_id,
            "attempt": self.attempt,
            "status": self.status.value,
            "passed": self.passed,
            "results": [result.to_json() for result in self.results],
        }
