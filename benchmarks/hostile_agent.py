"""The hostile agent of ``bench_hostile.py``: every known attack on the server, all at once.

Each attack is a loop that repeats until the process is stopped, counting what
the server answered (HTTP status, or the reply code of a message).  The counts
are written to a JSON file once a second, for the benchmark's report.  The
attacks are those of ``docs/security.md`` §5: cycles and creations through
``/v1/messages``, a vault-GET flood, unstarted sandboxes and a deadline of
2^64-1, huge uploads and ``.zero 500000000``, debug sessions of 64 MiB, CPU
hogs, large outputs read back, proofs of long runs, a mailbox never read, an
agora flood, fresh keys for every request, and requests as fast as it can.
"""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kforge.server import AgentKey

SPIN = "top: TICK\n JMP top\n"
GETS = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LI   r8, 33
        ADD  r10, r253, r8
        LOADW r5, r10, 0
        LI   r6, 1
        LI   r7, 65536
        LI   r8, 4096
        ADD  r9, r253, r8
        LI   r3, 33
again:  JZ   r5, done
        SEND 3, r253, r3
        RECV 3, r4, r9, r7
        SUB  r5, r5, r6
        JMP  again
done:   HALT
"""
BIG_OUTPUT = """
        LI   r2, 65000
        LI   r5, 64
        LI   r6, 1
again:  JZ   r5, done
        SEND 0, r253, r2
        SUB  r5, r5, r6
        JMP  again
done:   HALT
"""
LONG_RUN = """
        LI   r1, 1000000
        LI   r2, 1
again:  SUB  r1, r1, r2
        JNZ  r1, again
        HALT
"""
#: Publishes a 60 KB message on topic "t<n>" for n = 0, 1, 2, … until stopped.
AGORA = """
        LI   r1, 1
        STORE r1, r253, 0
        LI   r1, 2
        STOREW r1, r253, 1
        LI   r1, 0x74
        STORE r1, r253, 3
        LI   r7, 60006
        LI   r8, 4096
        ADD  r9, r253, r8
        LI   r10, 65536
        LI   r6, 1
again:  LOAD r1, r253, 4
        ADD  r1, r1, r6
        STORE r1, r253, 4
        SEND 5, r253, r7
        RECV 5, r4, r9, r10
        JMP  again
"""
HEAVY = (
    " ".join(f"l{i}:" for i in range(40_000))
    + "\n"
    + "".join(f"x{i}: LI r1, {i}\n" for i in range(34_000))
    + "HALT\n"
)


#: The hostile agent's requests a second, all attacks together: twenty times what one
#: agent is allowed (``AuthConfig.rate_per_second``), so every limit is pressed hard.
#: More would measure how many requests a second the server can refuse at all, which is
#: for the network in front of it (connections per address), not for these limits.
REQUESTS_PER_SECOND = 1000


class RawHttp:
    """HTTP/1.1 written by hand over keep-alive connections (one per request in flight),
    at most ``REQUESTS_PER_SECOND`` requests a second in all.

    A request costs this process some tens of microseconds, where an HTTP library
    takes a millisecond: the attacker's own work stays small beside what it makes
    the server do (on loopback it shares the CPU with the honest agents).
    """

    def __init__(self, base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._next = 0.0

    async def _pace(self) -> None:
        """Wait for this request's turn (requests go out at most at the agent's rate)."""
        now = time.monotonic()
        self._next = max(self._next, now) + 1 / REQUESTS_PER_SECOND
        if self._next - now > 1 / REQUESTS_PER_SECOND:
            await asyncio.sleep(self._next - now)

    async def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """The status and the body of the answer (raises ``OSError`` and the like)."""
        await self._pace()
        reader, writer = self._idle.pop() if self._idle else await self._connect()
        try:
            lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}"]
            lines += [f"content-length: {len(body)}", "content-type: application/json"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            status = int((await reader.readline()).split()[1])
            length, close = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                elif name.lower() == "connection":
                    close = value.strip().lower() == "close"
            data = await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        if close:
            writer.close()
        else:
            self._idle.append((reader, writer))
        return status, data

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


class Hostile:
    """One agent (and, for the key-churn attack, many throwaway ones)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.key = AgentKey.generate()
        self.http = RawHttp(base_url)
        self.token = ""
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)

    async def login(self) -> None:
        headers = self.key.request_headers("POST", "/v1/session", b"")
        _, answer = await self.http.request("POST", "/v1/session", b"", headers)
        self.token = json.loads(answer)["token"]

    async def call(self, attack: str, method: str, path: str, body: Any = None) -> Any:
        raw = json.dumps(body).encode() if body is not None else b""
        try:
            status, answer = await asyncio.wait_for(
                self.http.request(method, path, raw, {"authorization": f"Bearer {self.token}"}),
                120,
            )
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError) as error:
            self.outcomes[attack][type(error).__name__] += 1
            return None
        self.outcomes[attack][str(status)] += 1
        try:
            return json.loads(answer)
        except ValueError:
            return None

    async def message(self, attack: str, code: int, payload: dict[str, Any]) -> Any:
        reply = await self.call(attack, "POST", "/v1/messages", {"code": code, "payload": payload})
        if isinstance(reply, dict) and "code_name" in reply:
            self.outcomes[attack]["reply " + reply["code_name"]] += 1
        return reply

    async def program(self, attack: str, source: str) -> str | None:
        stored = await self.call(attack, "POST", "/v1/programs", {"assembly": source})
        return stored.get("program_id") if isinstance(stored, dict) else None

    async def sandbox(self, attack: str, code: str, **fields: Any) -> str | None:
        body = {"code": code, "memory_quota": 65536, "tick_budget": 10**9, **fields}
        made = await self.call(attack, "POST", "/v1/sandboxes", body)
        return made.get("sandbox_id") if isinstance(made, dict) else None

    # ------------------------------------------------------------------ the attacks

    async def cycles(self) -> None:
        while True:
            await self.message("cycle_by_message", 0x0508, {})

    async def creations(self) -> None:
        code = await self.program("create_flood", "HALT")
        while True:
            payload = {"owner": self.key.agent_id.hex, "code": code, "memory_quota": 64 << 20}
            await self.message("create_flood", 0x0500, {**payload, "tick_budget": 10})
            await self.message(
                "deadline_2^64-1", 0x0500, {**payload, "tick_budget": 10, "deadline_ms": 2**64 - 1}
            )
            await asyncio.sleep(0.05)

    async def vault_gets(self) -> None:
        put = await self.call("vault_gets", "POST", "/v1/programs", {"assembly": "HALT"})
        del put
        code = await self.program("vault_gets", GETS)
        obj = await self.program("vault_gets", ".data\nx: .zero 63000\n.code\n HALT")
        while code and obj:
            request = b"\x01" + bytes.fromhex(obj) + struct.pack("<Q", 5000)
            sandbox = await self.sandbox(
                "vault_gets", code, memory_quota=200 * 1024, grants=[3], input_hex=request.hex()
            )
            if sandbox is None:
                await asyncio.sleep(0.5)
                continue
            await self.call("vault_gets", "POST", f"/v1/sandboxes/{sandbox}/start", {})
            result = await self.call(
                "vault_gets", "GET", f"/v1/sandboxes/{sandbox}/wait?timeout=60"
            )
            if isinstance(result, dict):
                self.outcomes["vault_gets"]["ended " + str(result.get("state"))] += 1

    async def spinners(self) -> None:
        code = await self.program("cpu_hogs", SPIN)
        while code:
            sandbox = await self.sandbox("cpu_hogs", code, tick_budget=10**12)
            if sandbox is None:
                await asyncio.sleep(1)
                continue
            await self.call("cpu_hogs", "POST", f"/v1/sandboxes/{sandbox}/start", {})

    async def debug_sessions(self) -> None:
        while True:
            await self.call(
                "debug_64MiB", "POST", "/v1/debug", {"assembly": "HALT", "memory_quota": 64 << 20}
            )
            await asyncio.sleep(0.2)

    async def uploads(self) -> None:
        while True:
            await self.call("huge_upload", "POST", "/v1/programs", {"assembly": HEAVY})

    async def zeros(self) -> None:
        while True:
            await self.call(
                "zero_500MB",
                "POST",
                "/v1/programs",
                {"assembly": ".data\n.zero 500000000\n.code\nHALT"},
            )
            await asyncio.sleep(0.1)

    async def key_churn(self) -> None:
        while True:
            key = AgentKey.generate()
            headers = key.request_headers("GET", "/v1/whoami", b"")
            try:
                status, _ = await self.http.request("GET", "/v1/whoami", b"", headers)
                self.outcomes["fresh_keys"][str(status)] += 1
            except (OSError, ValueError, asyncio.IncompleteReadError) as error:
                self.outcomes["fresh_keys"][type(error).__name__] += 1

    async def big_outputs(self) -> None:
        code = await self.program("big_output", BIG_OUTPUT)
        sandbox = await self.sandbox("big_output", code, memory_quota=8 << 20) if code else None
        if sandbox is None:
            return
        await self.call("big_output", "POST", f"/v1/sandboxes/{sandbox}/start", {})
        while True:
            await self.call("big_output", "GET", f"/v1/sandboxes/{sandbox}/wait?timeout=30")
            await self.call("big_output", "GET", f"/v1/sandboxes/{sandbox}/io")
            await self.call("big_output", "GET", f"/v1/sandboxes/{sandbox}/record")

    async def proofs(self) -> None:
        code = await self.program("long_proofs", LONG_RUN)
        sandbox = await self.sandbox("long_proofs", code) if code else None
        if sandbox is None:
            return
        await self.call("long_proofs", "POST", f"/v1/sandboxes/{sandbox}/start", {})
        await self.call("long_proofs", "GET", f"/v1/sandboxes/{sandbox}/wait?timeout=60")
        while True:
            await self.call("long_proofs", "POST", f"/v1/sandboxes/{sandbox}/proof", {})

    async def mailbox(self) -> None:
        code = await self.program("mailbox_flood", BIG_OUTPUT)
        while code:
            sandbox = await self.sandbox("mailbox_flood", code, memory_quota=8 << 20)
            if sandbox is None:
                await asyncio.sleep(0.5)
                continue
            await self.message("mailbox_flood", 0x0503, {"sandbox_id": sandbox})
            await asyncio.sleep(0.2)

    async def agora(self) -> None:
        code = await self.program("agora_flood", AGORA)
        while code:
            sandbox = await self.sandbox("agora_flood", code, grants=[5], tick_budget=10**7)
            if sandbox is None:
                await asyncio.sleep(1)
                continue
            await self.call("agora_flood", "POST", f"/v1/sandboxes/{sandbox}/start", {})
            await self.call("agora_flood", "GET", f"/v1/sandboxes/{sandbox}/wait?timeout=60")

    async def rate_flood(self) -> None:
        while True:
            await self.call("rate_flood", "GET", "/v1/whoami")

    async def report(self, path: Path) -> None:
        while True:
            await asyncio.sleep(1)
            self.write(path)

    def write(self, path: Path) -> None:
        values = {"outcomes": {name: dict(counts) for name, counts in self.outcomes.items()}}
        path.write_text(json.dumps(values, indent=2))


async def _main(base_url: str, path: Path, only: set[str]) -> None:
    hostile = Hostile(base_url)
    await hostile.login()
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    attacks = {
        "cycles": [hostile.cycles],
        "creations": [hostile.creations],
        "vault_gets": [hostile.vault_gets],
        "spinners": [hostile.spinners],
        "debug": [hostile.debug_sessions],
        "uploads": [hostile.uploads, hostile.uploads],
        "zeros": [hostile.zeros],
        "key_churn": [hostile.key_churn],
        "big_outputs": [hostile.big_outputs],
        "proofs": [hostile.proofs],
        "mailbox": [hostile.mailbox],
        "agora": [hostile.agora],
        "rate_flood": [hostile.rate_flood],
    }
    chosen = [
        attack() for name, each in attacks.items() if not only or name in only for attack in each
    ]
    tasks = [asyncio.ensure_future(work) for work in [*chosen, hostile.report(path)]]
    await stopping.wait()
    # Cancelled again until done: asyncio.wait_for (3.11) drops a cancellation that comes
    # as its request finishes, and a loop of fast requests meets that often.
    while pending := [task for task in tasks if not task.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
    hostile.write(path)
    hostile.http.close()


def run_hostile(base_url: str, path: Path, only: set[str] | None = None) -> int:
    """Every attack (or those named in ``only``) until SIGTERM; counts to ``path``."""
    asyncio.run(_main(base_url, path, only or set()))
    return 0
