"""JSON bodies that are not JSON, down to text that is not UTF-8, are the caller's error."""

from __future__ import annotations

import pytest

from kforge.core import InvalidRequest
from kforge.messages.payloads import SandboxRef
from kforge.server.codec import decode_body, decode_plain

NOT_JSON = [b'"\x9f"', b'{"sandbox_id": "\xff\xfe"}', b"\x97\x32", b"{", b"[1,]"]


@pytest.mark.parametrize("raw", NOT_JSON)
def test_a_body_that_is_not_json_is_an_invalid_request(raw: bytes) -> None:
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        decode_body(raw, "application/json", SandboxRef)
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        decode_plain(raw, "application/json")
