"""The docs restate the opcode, fault and channel tables; these tests keep them true."""

from __future__ import annotations

import re
from pathlib import Path

from kforge.isa import CHANNEL_DIRECTIONS, OPCODES, ChannelDirection, FaultCode

SPEC = (Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text()


def _table_rows(heading: str) -> list[list[str]]:
    section = SPEC.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append(cells)
    return rows


def test_instruction_table_matches_the_opcode_table() -> None:
    rows = [
        row for row in _table_rows("## 4. Instructions") if re.fullmatch(r"[0-9A-F]{2}", row[1])
    ]
    documented = {int(row[1], 16): (row[0], row[2].strip("`"), int(row[3])) for row in rows}
    assert set(documented) == set(OPCODES)
    for opcode, (mnemonic, syntax, ticks) in documented.items():
        info = OPCODES[opcode]
        assert mnemonic == info.mnemonic
        assert ticks == info.ticks, mnemonic
        operands = [part.strip() for part in syntax[len(mnemonic) :].split(",") if part.strip()]
        assert len(operands) == len(info.operands), mnemonic


def test_fault_table_matches_fault_codes() -> None:
    rows = [row for row in _table_rows("## 6. Faults") if row[0].startswith("0x")]
    assert {int(row[0], 16): row[1] for row in rows} == {f.value: f.name for f in FaultCode}


def test_channel_table_matches_directions() -> None:
    rows = [row for row in _table_rows("## 5. Channels") if row[0].isdigit()]
    for row in rows:
        direction = CHANNEL_DIRECTIONS[int(row[0])]
        assert row[2] == direction.value
    assert all(d is ChannelDirection.RESERVED for d in CHANNEL_DIRECTIONS[8:])
