"""CPU-heavy work off the event loop: each job in a process of its own, under a time limit.

Assembling or compiling an upload, linking, disassembling a large program and
replaying a run for its proof take time in proportion to their input.  Done on
the event loop, one large request would stall every other, ``/v1/health``
included.  :class:`Offload` runs such a job (a top-level function of bytes and
numbers, :mod:`kforge.engine.jobs`) in a worker process forked from a fork
server that has kforge loaded, so the event loop, and every request that does
not wait for this job, goes on meanwhile; the operating system's scheduler, not
the interpreter's lock, shares the CPU.  A job that outlives its time limit is
killed (:class:`WorkTimedOut`, and nothing of it is kept).  Jobs whose input is
small (``WorkLimits.inline_bytes``) run inline, where a process would cost more
than the work.

The pool is shared fairly: at most ``workers`` jobs run at once, and one agent
has at most ``per_agent`` jobs running or waiting (more is :class:`OverLimit`),
so an agent sending huge uploads waits for its own and cannot queue ahead of the
others; and a job's process runs at a lower priority than the server
(``WORKER_NICENESS``), so requests and sandboxes come first: low enough that a
build takes a tenth of a busy CPU, not so low that it starves past its time
limit (``SCHED_IDLE`` did, on a saturated host).  A job's
:class:`~kforge.core.ForgeError` comes back as
:class:`JobFailed`, with the original's category, code, HTTP status, message and
context.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final, TypeVar

from kforge.core import AgentId, ErrorCategory, ForgeError, Internal, KingdomError
from kforge.engine.policy import OverLimit

__all__ = ["JobFailed", "Offload", "WorkLimits", "WorkTimedOut"]

T = TypeVar("T")

#: How much lower a job's process runs than the server (``nice``).
WORKER_NICENESS: Final = 10
#: What the fork server loads once, so that each job's process starts with it.
_PRELOAD: Final = [
    "kforge.asm",
    "kforge.disasm",
    "kforge.link",
    "kforge.program",
    "kforge.proofs",
    "kforge.engine.jobs",
    "kforge.starlark",
    "kforge.fast",  # where it loads: a compile's worker need not import wasmtime each time
]


@dataclass(frozen=True, slots=True)
class WorkLimits:
    """The pool for CPU-heavy work (``docs/security.md``).

    ``time_limit`` is one job's wall-clock seconds; ``workers`` how many run at
    once; ``per_agent`` how many one agent may have running or waiting;
    ``inline_bytes`` the input size up to which a job runs on the spot.
    """

    workers: int = 2
    time_limit: float = 30.0
    per_agent: int = 1
    inline_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        if self.workers < 1 or self.per_agent < 1 or self.time_limit <= 0:
            raise ValueError("workers and per_agent must be at least 1, time_limit positive")


class WorkTimedOut(ForgeError):
    """A job that did not finish within its time limit (it was stopped; 422: asking again
    for the same does not fit either)."""

    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 422

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} took longer than its time limit of {seconds:g} s and was stopped")
        self.what = what
        self.seconds = seconds


class JobFailed(ForgeError):
    """A job's own error, as the job's process raised it (same category, code and status)."""

    def __init__(self, kingdom: KingdomError, http_status: int) -> None:
        super().__init__(kingdom.message.decode("utf-8", "replace"))
        self.kingdom = kingdom
        self.http_status = http_status  # type: ignore[misc]
        self.category = kingdom.category  # type: ignore[misc]
        self.code = kingdom.code  # type: ignore[misc]

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        merged = {**self.kingdom.context, **(context or {})}
        return KingdomError(self.kingdom.code, self.kingdom.category, self.kingdom.message, merged)


def _run_job(channel: Connection, job: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """The worker process: run ``job`` (at a lower priority) and send back its value or its
    error."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    try:
        channel.send(("ok", job(*args)))
    except ForgeError as error:
        channel.send(("error", (error.to_kingdom_error(), error.http_status)))
    except MemoryError:
        channel.send(("error", (Internal("the job ran out of memory").to_kingdom_error(), 500)))
    except Exception as error:  # a bug: reported, never a hang
        failure = Internal(f"{type(error).__name__}: {error}")
        channel.send(("error", (failure.to_kingdom_error(), 500)))
    finally:
        channel.close()


class Offload:
    """The engine's pool for CPU-heavy work (see the module's description)."""

    def __init__(self, limits: WorkLimits | None = None) -> None:
        self.limits = limits or WorkLimits()
        self._slots = asyncio.Semaphore(self.limits.workers)
        self._by_agent: dict[AgentId, int] = {}
        self._context: Any = None
        self._running: set[Any] = set()
        self._closed = False

    def close(self) -> None:
        """Stop every job's process now and start no other (the engine is closing: nobody
        waits for them).  Each job stopped, or still waiting, ends :class:`Internal`."""
        self._closed = True
        for process in list(self._running):
            if process.is_alive():
                process.kill()

    def _refuse_when_closed(self, what: str) -> None:
        if self._closed:
            raise Internal(f"{what} was stopped: the engine closed")

    def _process_context(self) -> Any:
        if self._context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(_PRELOAD)
            self._context = context
        return self._context

    async def run(
        self,
        agent: AgentId,
        what: str,
        size: int,
        job: Callable[..., T],
        *args: Any,
        inline: bool = True,
    ) -> T:
        """``job(*args)``, inline when ``size`` (its input, in bytes) is small, else in a
        worker process under the time limit.  ``what`` names it in errors.  A job whose
        cost does not follow its size (compiling Starlark) says ``inline=False``: it
        always runs in a process, under the time limit."""
        self._refuse_when_closed(what)
        if inline and size <= self.limits.inline_bytes:
            return job(*args)
        held = self._by_agent.get(agent, 0)
        if held >= self.limits.per_agent:
            raise OverLimit("per_agent jobs", held + 1, self.limits.per_agent, f"agent {agent}")
        self._by_agent[agent] = held + 1
        try:
            async with self._slots:
                return await self._in_process(what, job, args)  # type: ignore[no-any-return]
        finally:
            left = self._by_agent[agent] - 1
            if left:
                self._by_agent[agent] = left
            else:
                del self._by_agent[agent]

    async def _in_process(self, what: str, job: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        process, receiver = await loop.run_in_executor(None, self._start, what, job, args)
        try:
            outcome, value = await asyncio.wait_for(
                loop.run_in_executor(None, _receive, receiver), self.limits.time_limit
            )
        except TimeoutError:
            raise WorkTimedOut(what, self.limits.time_limit) from None
        finally:
            await loop.run_in_executor(None, self._stop, process, receiver)
        return self._outcome(what, outcome, value)

    def run_blocking(self, what: str, job: Callable[..., T], *args: Any) -> T:
        """``job(*args)`` in a worker process under the time limit, waited for here: for a
        thread of its own (a compile thread), never the event loop.  Not counted in the
        pool's slots (each such thread runs one job at a time)."""
        process, receiver = self._start(what, job, args)
        try:
            if not receiver.poll(self.limits.time_limit):
                raise WorkTimedOut(what, self.limits.time_limit)
            outcome, value = _receive(receiver)
        finally:
            self._stop(process, receiver)
        return self._outcome(what, outcome, value)  # type: ignore[no-any-return]

    def _start(
        self, what: str, job: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[Any, Connection]:
        """A job's process, started, and the end of the pipe its answer comes on."""
        self._refuse_when_closed(what)  # it may have waited while the engine closed
        context = self._process_context()
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_run_job, args=(sender, job, args), daemon=True)
        process.start()
        self._running.add(process)
        sender.close()
        return process, receiver

    def _stop(self, process: Any, receiver: Connection) -> None:
        if process.is_alive():
            process.kill()
        receiver.close()
        process.join()
        self._running.discard(process)

    def _outcome(self, what: str, outcome: str, value: Any) -> Any:
        self._refuse_when_closed(what)
        if outcome == "ok":
            return value
        kingdom, status = value
        raise JobFailed(kingdom, status)


def _receive(channel: Connection) -> tuple[str, Any]:
    """What the job's process sent; a process that died first is an internal error."""
    with contextlib.suppress(EOFError, OSError):
        found: tuple[str, Any] = channel.recv()
        return found
    return (
        "error",
        (Internal("the job's process ended without an answer").to_kingdom_error(), 500),
    )
