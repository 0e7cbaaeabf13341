"""Message codes beyond the seed's tables, and their names.

- ``ReplyCode.ACK`` (0x05F0): a request was done or accepted; payload per request.
- ``ReplyCode.ERROR`` (0x05F1): a request was refused; payload is a ``KingdomError``.
- ``ReplyCode.SANDBOX_INFO`` (0x05F2): the answer to ``SANDBOX_STATUS``.
- ``ReplyCode.LINK_RESULT`` (0x05F3): the answer to ``LINK_RESOLVE``.
- ``ExtensionCode.SANDBOX_DELIVER`` (0x0507): input for a sandbox's stdin.
- ``ExtensionCode.CYCLE_ADVANCE`` (0x0508): begin the engine's next cycle.
- ``ExtensionCode.SERVICE_FUND`` (0x0509): pay a suspended service's cycle and resume it.
"""

from __future__ import annotations

from enum import IntEnum

from kforge.core import MessageCode

__all__ = ["ExtensionCode", "ReplyCode", "code_name"]


class ReplyCode(IntEnum):
    """Codes of the engine's direct replies (the seed leaves them to the implementation)."""

    ACK = 0x05F0
    ERROR = 0x05F1
    SANDBOX_INFO = 0x05F2
    LINK_RESULT = 0x05F3


class ExtensionCode(IntEnum):
    """Requests beyond the seed's table."""

    SANDBOX_DELIVER = 0x0507  # { sandbox_id, channel, data }: input for a sandbox (stdin)
    CYCLE_ADVANCE = 0x0508  # { allowances: [{agent, ticks}] }: begin the next cycle
    SERVICE_FUND = 0x0509  # { service_id }: pay this cycle of a service and resume it


def code_name(code: int) -> str:
    """The name of a message code, or its hex form when it has none."""
    for enum in (MessageCode, ReplyCode, ExtensionCode):
        try:
            return enum(code).name
        except ValueError:
            continue
    return f"0x{code:04X}"
