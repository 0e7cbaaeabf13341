"""The fuzz targets: each takes raw bytes and raises only when it finds a bug.

A target either refuses its input with the typed error the component documents,
or accepts it and then checks a property that must hold for every accepted input
(a canonical round trip, full validation of a result, two tiers agreeing).  Any
other exception, a hang or a crash is a finding.

To add a target: write ``def name(data: bytes) -> None`` and list it in
``TARGETS`` with its input size; put a few small inputs that reach deep into it
under ``fuzz/corpus/<name>/``.  ``fuzz/run.py`` runs it coverage-guided,
``tests/test_fuzz_corpus.py`` replays its corpus in every test run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import httpx
import msgpack
import msgspec

from kforge.asm import AssemblyError, assemble
from kforge.core import (
    AgentId,
    Hash256,
    Internal,
    InvalidProgram,
    UnresolvedSymbol,
    VaultFetchFailed,
)
from kforge.disasm import disassemble
from kforge.engine import CreateSandbox, Engine
from kforge.isa import OPCODES, Instruction, Opcode, decode_instruction
from kforge.limits import InputTooLarge
from kforge.link import Import, derive_imports, link
from kforge.machine import Machine
from kforge.messages import SCHEMAS, Envelope
from kforge.messages.codes import ReplyCode
from kforge.messages.payloads import ErrorReply
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)
from kforge.storage import Vault

_T = TypeVar("_T")
FUZZ_DIR = Path(__file__).resolve().parent


class Draw:
    """Structured choices read from fuzz bytes; past the end every choice is the first."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def below(self, bound: int) -> int:
        """A number in ``0..bound-1`` (``bound`` at most 256)."""
        return self.byte() % bound if bound > 1 else 0

    def choice(self, options: Sequence[_T]) -> _T:
        return options[self.below(len(options))]

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk + bytes(size - len(chunk))


# ------------------------------------------------------------------ container and assembler


def container(data: bytes) -> None:
    """FRGP bytes: refused with ``InvalidProgram``, or canonical and disassembled back exactly."""
    try:
        program = decode_program(data)
    except InvalidProgram:
        return
    assert program.encoded == data, "decode accepted bytes that are not canonical"
    assert assemble(disassemble(program)).encoded == data, "disassembly does not round-trip"


def assembler(data: bytes) -> None:
    """Assembly text: refused with ``AssemblyError``, or a program whose disassembly round-trips."""
    text = data.decode("utf-8", "replace")
    try:
        program = assemble(text)
    except (AssemblyError, InputTooLarge):
        return
    again = assemble(disassemble(program))
    assert again.encoded == program.encoded, "disassembly does not round-trip"


# ------------------------------------------------------------------ linker

_NAMES = (b"a", b"b", b"c", b"main")
_LINK_OPCODES = (Opcode.LI, Opcode.JMP, Opcode.CALL, Opcode.LOADW, Opcode.ADD, Opcode.HALT)


def _instruction(draw: Draw) -> Instruction:
    info = OPCODES[draw.choice(_LINK_OPCODES)]
    fields = {name: draw.below(4) for name in ("rd", "rs1", "rs2") if name in info.fields}
    imm = draw.choice((0, 1, 2, 8, 1 << 63, (1 << 64) - 1)) if "imm" in info.fields else 0
    return Instruction(info.opcode, imm=imm, **fields)


def _small_program(draw: Draw) -> ForgeProgram:
    code = tuple(_instruction(draw) for _ in range(1 + draw.below(6)))
    symbols = {
        name: Symbol(name, draw.choice(tuple(SymbolKind)), draw.below(10))
        for name in (draw.choice(_NAMES) for _ in range(draw.below(4)))
    }
    relocations = []
    for index in range(len(code)):
        if draw.below(3) == 0:
            kind = draw.choice(tuple(RelocationKind))
            name = draw.choice(_NAMES) if kind is RelocationKind.SYMBOL else b""
            relocations.append(Relocation(index, kind, name))
    data = draw.raw(draw.below(13))
    ordered = tuple(symbols[name] for name in sorted(symbols))
    return ForgeProgram(code, data, 0, ordered, tuple(relocations))


def linker(data: bytes) -> None:
    """Small programs and an import list: a typed refusal, or a valid, reproducible link."""
    draw = Draw(data)
    main = _small_program(draw)
    libraries = [_small_program(draw) for _ in range(draw.below(4))]
    store = {library.program_id: library for library in libraries}
    missing = Hash256.of(b"not stored")
    ids = [library.program_id for library in libraries] + [missing]
    imports = [
        Import(draw.choice(ids), tuple(draw.choice(_NAMES) for _ in range(draw.below(3))))
        for _ in range(draw.below(5))
    ]
    for attempt in (imports, derive_imports(main, libraries)):
        try:
            linked = link(main, attempt, store.__getitem__)
        except (UnresolvedSymbol, InvalidProgram, VaultFetchFailed):
            continue
        fields = (linked.code, linked.data, linked.entry)
        rebuilt = ForgeProgram(*fields, linked.symbols, linked.relocations, linked.metadata)
        assert rebuilt.encoded == linked.encoded
        assert decode_program(linked.encoded) == rebuilt, "a linked program does not decode"
        again = link(main, attempt, store.__getitem__)
        assert again.encoded == linked.encoded, "linking is not deterministic"


# ------------------------------------------------------------------ both tiers

_fast_tier: object | None = None


def _fast() -> object:
    global _fast_tier
    if _fast_tier is None:
        from kforge.fast import FastTier

        _fast_tier = FastTier(disk_cache=False, max_programs=64, max_region_blocks=4)
    return _fast_tier


def tiers(data: bytes) -> None:
    """A raw instruction stream runs to the same state on the reference and the fast tier."""
    draw = Draw(data)
    budget = draw.byte() << 4 | draw.byte() >> 4
    memory = draw.choice((64, 100, 4096))
    data_section = draw.raw(draw.below(17))
    words = [draw.raw(16) for _ in range(1 + (len(data) - draw.at) // 16)]
    code = tuple(decode_instruction(word)[0].with_unused_fields_cleared() for word in words[:64])
    program = ForgeProgram(code, data_section)
    machines = [
        Machine.load(program, tick_budget=budget, memory_quota=memory, grants=[3, 7])
        for _ in range(2)
    ]
    reference, fast = machines
    reference.run()
    _fast().run(fast, tier="fast")  # type: ignore[attr-defined]
    assert reference.snapshot() == fast.snapshot(), "the tiers disagree"
    assert reference.held_bytes == fast.held_bytes, "the tiers hold different message bytes"
    assert reference.deliveries == fast.deliveries


# ------------------------------------------------------------------ message handlers


@dataclass
class _Messaging:
    """One engine kept across inputs (as a server keeps one), with a program and a
    sandbox that messages can name."""

    loop: asyncio.AbstractEventLoop
    engine: Engine
    words: list[Any]


_messaging: _Messaging | None = None

#: Agents a message may come from: a sandbox's owner, a stranger, the engine itself.
_AGENTS: Final = (AgentId(b"\x01" * 32), AgentId(b"\x02" * 32))


def _engine() -> _Messaging:
    global _messaging
    if _messaging is None:
        loop = asyncio.new_event_loop()
        engine = Engine(Vault(":memory:"), tier="reference", standalone=True)
        loop.run_until_complete(engine.open())
        program = engine.vault.put_program(assemble("LI r2, 64\nRECV 2, r3, r253, r2\nHALT\n"))
        request = CreateSandbox(_AGENTS[0], program, 4096, 10_000)
        sandbox = loop.run_until_complete(engine.create_sandbox(request))
        words = [
            program.raw, sandbox.raw, _AGENTS[0].raw, _AGENTS[1].raw, engine.agent_id.raw,
            0, 1, 3, 7, 64, 4096, 65536, 2**32, 2**64 - 1, -1, -(2**63),
            b"", b"count", "text", None, True, [], {}, 1.5,
        ]  # fmt: skip
        _messaging = _Messaging(loop, engine, words)
    return _messaging


def _value(draw: Draw, words: list[Any], depth: int = 0) -> Any:
    """A msgpack value: one of the words messages name, or a list or map of values."""
    kind = draw.below(8)
    if kind == 0 and depth < 3:
        return [_value(draw, words, depth + 1) for _ in range(draw.below(4))]
    if kind == 1 and depth < 3:
        keys = (draw.choice(words) for _ in range(draw.below(3)))
        return {
            key: _value(draw, words, depth + 1) for key in keys if not isinstance(key, list | dict)
        }
    if kind == 2:
        return draw.raw(draw.below(40))
    return draw.choice(words)


def messages(data: bytes) -> None:
    """An envelope of any code, from the owner or a stranger, whose payload names the
    schema's fields with values drawn from the ids the engine knows, or is raw bytes:
    always one reply to it (ACK, a response, or an ERROR), never an internal error."""
    messaging = _engine()
    draw = Draw(data)
    code = draw.choice([*SCHEMAS, draw.byte() << 8 | draw.byte()])
    schema = SCHEMAS.get(code)
    if schema is not None and draw.below(4):
        fields = msgspec.structs.fields(schema)
        payload = msgpack.packb(
            {f.encode_name: _value(draw, messaging.words) for f in fields if draw.below(5)},
            use_bin_type=True,
        )
    else:
        payload = draw.raw(draw.below(64))
    envelope = Envelope(
        Hash256.of(data), draw.choice(_AGENTS), code, payload, draw.below(2) * 2**40
    )
    raw = envelope.encode() if draw.below(8) else draw.raw(len(data))
    engine = messaging.engine
    reply = Envelope.decode(
        messaging.loop.run_until_complete(asyncio.wait_for(engine.dispatch_bytes(raw), 30))
    )
    if reply.code == ReplyCode.ERROR:
        error = msgspec.msgpack.decode(reply.payload, type=ErrorReply)
        assert error.code != Internal.code, f"internal error: {error.message!r}"


# ------------------------------------------------------------------ the HTTP API


@dataclass
class _Serving:
    """One server app (with its engine) kept across inputs, called in process."""

    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    tokens: list[str]
    words: list[Any]


_serving: _Serving | None = None


def _server() -> _Serving:
    global _serving
    if _serving is None:
        from kforge.server import AuthConfig, ServerConfig
        from kforge.server.app import create_app

        messaging = _engine()
        rates = AuthConfig(rate_per_second=10**9, rate_burst=10**9)
        app = create_app(messaging.engine, ServerConfig(auth=rates, max_wait_seconds=1))
        state = app.state.kforge
        agent_token, _ = state.authenticator.issue_token(_AGENTS[0])
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fuzz")
        tokens = [state.dev_token, agent_token, "", "not a token"]
        _serving = _Serving(messaging.loop, client, tokens, messaging.words)
    return _serving


def _path(draw: Draw, template: str, words: list[Any]) -> str:
    """``template`` with each ``{name}`` replaced by an id the engine holds, or garbage."""
    parts = []
    for part in template.split("/"):
        if part.startswith("{"):
            word = draw.choice(words[:5])
            part = word.hex() if draw.below(4) else draw.raw(draw.below(8)).hex() + "%00"
        parts.append(part)
    return "/".join(parts)


def http(data: bytes) -> None:
    """A request to any route of the API, as the operator, an agent, nobody or a forger,
    with a JSON or msgpack body naming the body schema's fields (or raw bytes) and a
    query: never a 5xx answer."""
    from kforge.server.app import ALL_OPERATIONS

    serving = _server()
    draw = Draw(data)
    operation = draw.choice(ALL_OPERATIONS)
    path = _path(draw, operation.path, serving.words)
    values: Any = {}
    if operation.body is not None and draw.below(4):
        fields = msgspec.structs.fields(operation.body)
        values = {f.encode_name: _value(draw, serving.words) for f in fields if draw.below(5)}
    kind = draw.below(3)
    if kind == 0:
        content_type, body = "application/json", _json(values)
    elif kind == 1:
        content_type, body = "application/msgpack", msgpack.packb(values, use_bin_type=True)
    else:
        content_type, body = draw.choice(("application/json", "text/plain")), draw.raw(64)
    token = draw.choice(serving.tokens)
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    query = {"limit": str(draw.choice(serving.words[5:16])), "all": "true"} if draw.below(2) else {}
    request = serving.client.request(
        operation.method, path, content=body, headers=headers, params=query
    )
    response = serving.loop.run_until_complete(asyncio.wait_for(request, 30))
    assert response.status_code < 500, (operation.path, response.status_code, response.text)


def _json(values: Any) -> bytes:
    """``values`` as JSON, bytes written as hex (as the API writes ids), keys as text."""

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, list):
            return [plain(item) for item in value]
        if isinstance(value, dict):
            return {str(plain(key)): plain(item) for key, item in value.items()}
        return value

    return json.dumps(plain(values)).encode()


# ------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Target:
    """A fuzz target: its function, the longest input worth trying and an optional dictionary."""

    name: str
    run: Callable[[bytes], None]
    max_len: int
    dictionary: str | None = None

    @property
    def corpus(self) -> Path:
        """The small seed corpus kept in the repository."""
        return FUZZ_DIR / "corpus" / self.name


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("container", container, 4096),
        Target("assembler", assembler, 4096, "assembly.dict"),
        Target("linker", linker, 256),
        Target("tiers", tiers, 1024),
        Target("messages", messages, 512),
        Target("http", http, 512),
    )
}
