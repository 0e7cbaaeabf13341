"""docs/engine.md restates codes, kinds and formats; these tests keep it true."""

from __future__ import annotations

import re
from pathlib import Path

from kforge.core import EventKind, MessageCode
from kforge.events import EVENT_FIELDS, ExtensionEventKind, event_kind
from kforge.host import AgoraOp, MintOp, OracleOp, PeerOp, Status, VaultOp
from kforge.messages import ExtensionCode, ReplyCode

DOC = (Path(__file__).resolve().parents[1] / "docs" / "engine.md").read_text()


def _section(heading: str) -> str:
    return DOC.split(heading, 1)[1].split("\n## ", 1)[0]


def _rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not set(line) <= set("|-: ")
    ]


def test_event_table_lists_every_kind_with_its_fields() -> None:
    rows = [row for row in _rows(_section("## 9. Events")) if row[0].startswith("0x4")]
    assert {int(row[0], 16): row[1].split()[0] for row in rows} == {
        kind.value: kind.name for kind in (*EventKind, *ExtensionEventKind)
    }
    for row in rows:
        kind = event_kind(int(row[0], 16))
        documented = set(re.findall(r"[a-z_]+", row[2].split("—")[0].split("(")[0]))
        assert set(EVENT_FIELDS[kind]) <= documented | {"fault_name", "fault_detail"}, kind


def test_message_tables_list_every_code() -> None:
    section = _section("## 8. Messages")
    codes = {
        int(row[0], 16): row[1].split()[0] for row in _rows(section) if row[0].startswith("0x05")
    }
    expected = {code.value: code.name for code in (*MessageCode, *ReplyCode, *ExtensionCode)}
    assert codes == expected


def test_host_formats_name_every_status_and_op() -> None:
    section = _section("## 11. Host channels")
    for status in Status:
        if status is not Status.INCOMING:
            assert f"{status.value} {status.name}" in section
    for ops in (VaultOp, OracleOp, AgoraOp, MintOp, PeerOp):
        for op in ops:
            assert f"0x{op.value:02X} {op.name}" in section, op
