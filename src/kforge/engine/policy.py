"""Who may do what on the engine, and how much of its pools one agent may hold.

One table, :data:`RULES`, says for every :class:`Action` who may take it: the
owner of the sandbox or service it names, another agent holding a grant on that
sandbox, the engine's operators, or any agent.  :class:`Policy` enforces it and is
the only code that does.  Every way into the engine ends in one of its operations
(:mod:`~kforge.engine.sandboxes`, :mod:`~kforge.engine.service_ops`,
:mod:`~kforge.engine.artifacts`, :mod:`~kforge.engine.execution`), and each
operation asks the policy before it does anything: the engine's methods, the
Forge messages of the :class:`~kforge.engine.dispatch.Dispatcher` (each code is one
action, :data:`~kforge.engine.dispatch.MESSAGE_ACTIONS`), and through them the HTTP
routes (each names its action), the client, the event socket and the command line.
Nothing outside this module decides who may do what.

The policy also admits what one agent may hold of the engine's pools, so no agent
can take a pool from the others: live sandboxes and memory quota (a per-agent
share of the engine's totals, :meth:`Policy.admit_sandbox`), the bytes the host
keeps for its sandboxes (:meth:`Policy.host_room`), and its requests a second
(:class:`RateLimiter`, whose per-agent records are bounded and dropped when
stale).  ``docs/security.md`` lists every rule and limit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from kforge.core import (
    AgentId,
    ErrorCategory,
    ForgeError,
    Hash256,
    KingdomError,
    MemoryQuotaExceeded,
    PermissionDenied,
    SandboxSetAside,
    TooManySandboxes,
)
from kforge.engine.models import EngineLimits, Operation
from kforge.engine.sandbox import Sandbox, ServiceRecord
from kforge.engine.state import EngineState

__all__ = [
    "RULES",
    "Action",
    "OverLimit",
    "Policy",
    "RateLimited",
    "RateLimiter",
    "Rule",
    "Rules",
]


class Action(Enum):
    """Everything an agent can ask of the engine (and of the server around it)."""

    CREATE_SANDBOX = "create_sandbox"
    LIST_SANDBOXES = "list_sandboxes"
    LIST_ALL_SANDBOXES = "list_all_sandboxes"
    READ_SANDBOX = "read_sandbox"
    READ_RUN_RECORD = "read_run_record"
    REQUEST_PROOF = "request_proof"
    EXECUTE = "execute"
    DELIVER = "deliver"
    KILL = "kill"
    FORGET = "forget"
    GRANT = "grant"
    LINK = "link"
    PUT_PROGRAM = "put_program"
    READ_PROGRAM = "read_program"
    CREATE_SERVICE = "create_service"
    READ_SERVICE = "read_service"
    CALL_SERVICE = "call_service"
    FUND_SERVICE = "fund_service"
    BEGIN_CYCLE = "begin_cycle"
    SEND_MESSAGE = "send_message"
    READ_MAILBOX = "read_mailbox"
    WATCH_EVENTS = "watch_events"
    WATCH_ALL_EVENTS = "watch_all_events"
    READ_STATS = "read_stats"
    DEBUG = "debug"
    IDENTIFY = "identify"
    HEALTH = "health"


@dataclass(frozen=True, slots=True)
class Rule:
    """Who may take one action.

    ``owner``: the agent owning what the action names (a sandbox, a service, a
    debug session, its own mailbox; for a creation, the owner the request
    names must be the requester).  ``grant``: other agents holding that grant on
    the sandbox.  ``operator``: the engine's operators.  ``anyone``: every
    authenticated agent; ``public``: even an unauthenticated caller.
    ``hidden``: a refusal reads as "not found" (the thing's existence is not
    told to whoever may not use it).
    """

    summary: str
    owner: bool = False
    grant: Operation | None = None
    operator: bool = False
    anyone: bool = False
    public: bool = False
    hidden: bool = False

    def allows(
        self,
        agent: AgentId,
        *,
        operator: bool,
        owner: AgentId | None = None,
        access: Mapping[AgentId, frozenset[Operation]] | None = None,
    ) -> bool:
        """Whether ``agent`` may take the action on something owned by ``owner``."""
        if self.anyone or self.public or (self.operator and operator):
            return True
        if self.owner and owner is not None and agent == owner:
            return True
        return self.grant is not None and access is not None and self.grant in access.get(agent, ())

    def who(self) -> str:
        """The rule in words, for refusals and the documentation."""
        if self.public:
            return "anyone, unauthenticated"
        if self.anyone:
            return "any agent"
        parties = []
        if self.owner:
            parties.append("its owner")
        if self.grant is not None:
            parties.append(f"an agent holding a '{self.grant.value}' grant")
        if self.operator:
            parties.append("the operator")
        return " or ".join(parties) if parties else "nobody"


#: The one table of who may do what.  ``docs/security.md`` shows it; the tests walk
#: every message code and every route against it as an owner, another agent and
#: the operator.
RULES: Final[Mapping[Action, Rule]] = {
    Action.CREATE_SANDBOX: Rule("create a sandbox it owns", owner=True),
    Action.LIST_SANDBOXES: Rule("list its own sandboxes and those granted to it", anyone=True),
    Action.LIST_ALL_SANDBOXES: Rule("list every agent's sandboxes", operator=True),
    Action.READ_SANDBOX: Rule(
        "read a sandbox's status, result, output and I/O log",
        owner=True,
        grant=Operation.STATUS,
        operator=True,
    ),
    Action.READ_RUN_RECORD: Rule(
        "read a sandbox's run record", owner=True, grant=Operation.STATUS, operator=True
    ),
    Action.REQUEST_PROOF: Rule(
        "have a sandbox's run proven (paying for it)", owner=True, grant=Operation.STATUS
    ),
    Action.EXECUTE: Rule("start or step a sandbox", owner=True, grant=Operation.EXEC),
    Action.DELIVER: Rule("give a sandbox input on stdin", owner=True, grant=Operation.DELIVER),
    Action.KILL: Rule("kill a sandbox", owner=True, grant=Operation.KILL),
    Action.FORGET: Rule("forget a stopped sandbox", owner=True),
    Action.GRANT: Rule("grant and revoke operations on a sandbox", owner=True),
    Action.LINK: Rule("link a stored program with its imports", anyone=True),
    Action.PUT_PROGRAM: Rule("store a program", anyone=True),
    Action.READ_PROGRAM: Rule("read a stored program (by its id)", anyone=True),
    Action.CREATE_SERVICE: Rule("make a sandbox it owns a service", owner=True),
    Action.READ_SERVICE: Rule("read the services (they are public)", anyone=True),
    Action.CALL_SERVICE: Rule("call a service's endpoint", anyone=True),
    Action.FUND_SERVICE: Rule("pay a service's cycle", owner=True),
    Action.BEGIN_CYCLE: Rule("begin the next cycle", operator=True),
    Action.SEND_MESSAGE: Rule(
        "send a Forge message (each code is then decided as its own action)", anyone=True
    ),
    Action.READ_MAILBOX: Rule("read the envelopes sent to it", owner=True),
    Action.WATCH_EVENTS: Rule(
        "watch a sandbox's events", owner=True, grant=Operation.STATUS, operator=True
    ),
    Action.WATCH_ALL_EVENTS: Rule("watch every agent's events", operator=True),
    Action.READ_STATS: Rule("read the counts of its sandboxes", anyone=True),
    Action.DEBUG: Rule("use a debug session", owner=True, hidden=True),
    Action.IDENTIFY: Rule("learn who the server takes it for, get a token", anyone=True),
    Action.HEALTH: Rule("ask whether the server is up", public=True),
}


# ----------------------------------------------------------------- limits


class OverLimit(ForgeError):
    """A request that would take an agent (or the engine) past one of its limits (429).

    ``limit`` names the limit (as ``docs/security.md`` lists it), ``needed`` what
    the request would bring the holder to, ``maximum`` the limit's value.
    """

    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 429

    def __init__(self, limit: str, needed: int, maximum: int, holder: str) -> None:
        super().__init__(f"{holder} would hold {needed} of {limit}, over the limit of {maximum}")
        self.limit = limit
        self.needed = needed
        self.maximum = maximum
        self.holder = holder

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        merged = {
            b"limit": self.limit.encode(),
            b"needed": str(self.needed).encode(),
            b"maximum": str(self.maximum).encode(),
        }
        merged.update(context or {})
        return super().to_kingdom_error(merged)


class RateLimited(ForgeError):
    """An agent over its rate of requests, or of bytes sent (429, with the seconds to wait
    before asking again)."""

    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 429

    def __init__(
        self, agent: AgentId, rate: float, retry_after: float, unit: str = "requests"
    ) -> None:
        super().__init__(f"agent {agent} is over {rate:g} {unit}/s")
        self.agent = agent
        self.retry_after = retry_after


class RateLimiter:
    """A token bucket per agent: ``rate`` requests (or other ``unit``) a second, bursts of
    ``burst``.

    A bucket that has filled up again is the same as none, so buckets are kept
    only while they are short: each take drops a few stale ones (oldest use
    first), and at most ``max_agents`` are kept at all.  When that many agents
    are all short at once, the one that used its bucket longest ago is forgotten
    first (it gets a full bucket back: a burst, never more).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        monotonic: Callable[[], float],
        max_agents: int = 100_000,
        unit: str = "requests",
    ) -> None:
        if rate <= 0 or burst < 1 or max_agents < 1:
            raise ValueError("rate must be positive, burst and max_agents at least 1")
        self.rate = rate
        self.burst = burst
        self.max_agents = max_agents
        self.unit = unit
        self._monotonic = monotonic
        #: agent -> (tokens left, when last taken), least recently used first.
        self._buckets: OrderedDict[AgentId, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, agent: AgentId, amount: float = 1.0) -> None:
        """Spend ``amount`` (one request) of ``agent``'s bucket; raises ``RateLimited`` when
        it holds less (an amount over the burst is taken from a full bucket)."""
        now = self._monotonic()
        self._drop_stale(now)
        level, last = self._buckets.pop(agent, (float(self.burst), now))
        level = min(float(self.burst), level + (now - last) * self.rate)
        amount = min(amount, float(self.burst))
        if level < amount:
            self._buckets[agent] = (level, now)
            raise RateLimited(agent, self.rate, (amount - level) / self.rate, self.unit)
        self._buckets[agent] = (level - amount, now)
        while len(self._buckets) > self.max_agents:
            self._buckets.popitem(last=False)

    def _drop_stale(self, now: float, at_most: int = 4) -> None:
        """Forget a few buckets that have filled up again since they were last used."""
        refill = self.burst / self.rate
        for _ in range(at_most):
            if not self._buckets:
                return
            agent, (_, last) = next(iter(self._buckets.items()))
            if now - last < refill:
                return
            del self._buckets[agent]


# ----------------------------------------------------------------- the policy


class Rules:
    """Who is an operator, and what :data:`RULES` lets each agent do: the part of the
    policy that needs no sandbox (a cluster's gateway has only this part; the workers'
    engines hold the sandboxes and the rest, :class:`Policy`).

    ``operators`` are the agents that may take operator actions (``engine_agent``
    always may).  Refusals are ``PermissionDenied`` (403).
    """

    def __init__(self, engine_agent: AgentId, operators: Iterable[AgentId] = ()) -> None:
        self.engine_agent = engine_agent
        self._operators = {engine_agent, *operators}

    @property
    def operators(self) -> frozenset[AgentId]:
        return frozenset(self._operators)

    def add_operator(self, agent: AgentId) -> None:
        """Make ``agent`` an operator (the server's dashboard agent, say)."""
        self._operators.add(agent)

    def is_operator(self, agent: AgentId) -> bool:
        return agent in self._operators

    def allows(
        self,
        action: Action,
        agent: AgentId,
        *,
        owner: AgentId | None = None,
        access: Mapping[AgentId, frozenset[Operation]] | None = None,
    ) -> bool:
        """Whether ``agent`` may take ``action`` on something owned by ``owner``."""
        return RULES[action].allows(
            agent, operator=self.is_operator(agent), owner=owner, access=access
        )

    def authorize(
        self,
        action: Action,
        agent: AgentId,
        *,
        owner: AgentId | None = None,
        access: Mapping[AgentId, frozenset[Operation]] | None = None,
        what: str = "",
    ) -> None:
        """Return when ``agent`` may take ``action``; raise ``PermissionDenied`` saying who may."""
        if not self.allows(action, agent, owner=owner, access=access):
            rule = RULES[action]
            target = f" {what}" if what else ""
            raise PermissionDenied(
                f"agent {agent} may not {action.value.replace('_', ' ')}{target}: "
                f"only {rule.who()} may"
            )


class Policy(Rules):
    """The engine's rules (:data:`RULES`) and pools, enforced for every caller.

    ``operators`` are the agents that may take operator actions (the engine's own
    agent always may).  Refusals are ``PermissionDenied`` (403), or the
    not-found error of what was named when the rule is ``hidden``; an agent over
    a share of a pool gets ``OverLimit`` (429).
    """

    def __init__(
        self,
        state: EngineState,
        limits: EngineLimits,
        engine_agent: AgentId,
        operators: Iterable[AgentId] = (),
    ) -> None:
        super().__init__(engine_agent, operators)
        self.state = state
        self.limits = limits

    # ------------------------------------------------------------------ who

    def lists(self, agent: AgentId, sandbox: Sandbox) -> bool:
        """Whether ``sandbox`` is in ``agent``'s own list: it may read it as its owner or
        by grant (an operator's list of every sandbox is :attr:`Action.LIST_ALL_SANDBOXES`)."""
        return RULES[Action.READ_SANDBOX].allows(
            agent, operator=False, owner=sandbox.owner, access=sandbox.access
        )

    def sandbox(self, action: Action, sandbox_id: Hash256, agent: AgentId) -> Sandbox:
        """The sandbox, when ``agent`` may take ``action`` on it (``SandboxNotFound`` first,
        then ``PermissionDenied``, then ``SandboxSetAside`` for a sandbox whose program the
        vault could not give back when the engine reopened)."""
        found = self.state.sandbox(sandbox_id)
        self.authorize(
            action, agent, owner=found.owner, access=found.access, what=f"sandbox {found.id}"
        )
        problem = self.state.set_aside.get(found.id)
        if problem is not None:
            raise SandboxSetAside(found.id, problem)
        return found

    def service(self, action: Action, service_id: Hash256, agent: AgentId) -> ServiceRecord:
        """The service, when ``agent`` may take ``action`` on it (``ServiceNotFound`` first)."""
        found = self.state.service(service_id)
        self.authorize(action, agent, owner=found.owner, what=f"service {found.id}")
        return found

    # ------------------------------------------------------------------ pools

    def host_room(self, sandbox: Sandbox, size: int) -> OverLimit | None:
        """``None`` when the host may hold ``size`` more bytes for ``sandbox``; otherwise the
        limit it would pass: the sandbox's, its owner's share, or the engine's."""
        return self._host_room(sandbox.owner, sandbox.host_bytes, sandbox, size)

    def _host_room(
        self, owner: AgentId, held: int, holder: Sandbox | None, size: int
    ) -> OverLimit | None:
        """As :meth:`host_room`, for ``holder`` holding ``held`` bytes (``None``: a new
        sandbox).  Performance note: asked per host call, so a text naming who would pass
        a limit is made only when one would be passed."""
        maximum = self.limits.max_host_bytes_per_sandbox
        if held + size > maximum:
            who = f"sandbox {holder.id}" if holder is not None else "a new sandbox"
            return OverLimit("max_host_bytes_per_sandbox", held + size, maximum, who)
        return self._pools_room(owner, size)

    def _pools_room(self, owner: AgentId, size: int) -> OverLimit | None:
        """``None`` when ``size`` more bytes fit the owner's share of the host bytes and the
        engine's; otherwise the limit they would pass."""
        state, limits = self.state, self.limits
        held = state.host_bytes_of(owner)
        if held + size > limits.max_host_bytes_per_owner:
            return OverLimit(
                "max_host_bytes_per_owner",
                held + size,
                limits.max_host_bytes_per_owner,
                f"agent {owner}",
            )
        if state.host_bytes + size > limits.max_host_bytes:
            return OverLimit(
                "max_host_bytes", state.host_bytes + size, limits.max_host_bytes, "the engine"
            )
        return None

    def admit_program(self, owner: AgentId, program_id: Hash256, size: int) -> None:
        """Refuse (``OverLimit``) a sandbox of ``owner`` running a program of ``size`` decoded
        bytes that would take the owner's or the engine's host bytes past their limits
        (nothing when the owner runs that program already)."""
        if self.state.holds_program(owner, program_id):
            return
        over = self._pools_room(owner, size)
        if over is not None:
            raise over

    def admit_sandbox(self, owner: AgentId, quota: int, held: int = 0) -> None:
        """Refuse a new sandbox of ``quota`` bytes, for which the host would hold ``held``
        bytes (its request), that would take the engine or ``owner`` past its limits:
        live sandboxes (``TooManySandboxes``), memory (``MemoryQuotaExceeded`` for the
        engine's pool, ``OverLimit`` for the owner's share of it), host memory
        (``OverLimit``)."""
        state, limits = self.state, self.limits
        if state.live_count >= limits.max_sandboxes:
            raise TooManySandboxes(
                f"the engine already runs {state.live_count} of at most {limits.max_sandboxes}"
            )
        owned = state.live_owned_by(owner)
        if owned >= limits.max_sandboxes_per_owner:
            raise TooManySandboxes(
                f"owner {owner} already has {owned} live of at most "
                f"{limits.max_sandboxes_per_owner}"
            )
        if quota > limits.max_memory_quota:
            raise MemoryQuotaExceeded(quota, limits.max_memory_quota)
        memory = state.live_memory_of(owner) + quota
        if memory > limits.max_memory_per_owner:
            raise OverLimit(
                "max_memory_per_owner", memory, limits.max_memory_per_owner, f"agent {owner}"
            )
        if state.live_memory + quota > limits.max_total_memory:
            raise MemoryQuotaExceeded(state.live_memory + quota, limits.max_total_memory)
        over = self._host_room(owner, 0, None, held)
        if over is not None:
            raise over
