"""The source map a compiled program carries: written and read back."""

from __future__ import annotations

from kforge.debuginfo import DebugInfo, FunctionInfo, Site

FUNCTIONS = [FunctionInfo("main", "a.star", False), FunctionInfo("list_append", "", True)]
RUNS = [(0, 0, 1, 1), (3, 1, 0, 0), (7, 0, 2, 5)]
#: (return address, pushes, kind, function, line, column), out of address order.
ROWS = [(9, 2, 1, 0, 3, 4), (5, 0, 2, 0, 0, 0), (12, 1, 0, 1, 0, 0)]


def test_sites_given_as_rows_encode_as_the_same_sites_given_as_objects() -> None:
    by_rows = DebugInfo(FUNCTIONS, RUNS, site_rows=ROWS)
    by_objects = DebugInfo(FUNCTIONS, RUNS, {row[0]: Site(*row[1:]) for row in ROWS})
    assert by_rows.sites == by_objects.sites
    assert by_rows.encode() == by_objects.encode()
    decoded = DebugInfo.decode(by_rows.encode())
    assert decoded is not None
    assert decoded.sites == by_objects.sites
    assert decoded.runs == tuple(RUNS) and decoded.functions == tuple(FUNCTIONS)
