"""Every program in ``examples/`` runs and prints what it promises.

A new example must get an entry in ``EXPECTED``: the test for it fails until it has one.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kforge.cli import main

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.fasm"))
HAS_FAST_TIER = importlib.util.find_spec("kforge.fast") is not None
TIERS = [
    "reference",
    pytest.param(
        "fast", marks=pytest.mark.skipif(not HAS_FAST_TIER, reason="kforge.fast is not installed")
    ),
]

# name → (stdin text, exact stdout bytes); values worked out independently of the code.
EXPECTED: dict[str, tuple[str | None, bytes]] = {
    "hello": (None, b"Hello, Forge!\n"),
    "echo": ("ping", b"ping"),
    "fib": (None, b"2880067194370816120\n"),  # fib(90)
    "sieve": (None, b"1229\n"),  # primes below 10000
    "factorial": (None, b"2432902008176640000\n"),  # 20!
    "reverse": ("stressed", b"desserts"),
    "checksum": ("Wikipedia", b"300286872\n"),  # Adler-32 0x11E60398
}


def test_the_examples_directory_is_not_empty() -> None:
    assert EXAMPLE_FILES


def test_every_expectation_has_its_example() -> None:
    assert set(EXPECTED) <= {path.stem for path in EXAMPLE_FILES}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_example_prints_its_expected_output(
    path: Path, tier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert path.stem in EXPECTED, f"examples/{path.name} has no expectation in test_examples.py"
    stdin, expected = EXPECTED[path.stem]
    argv = ["run", str(path), "--json", "--tier", tier]
    if stdin is not None:
        argv += ["--input", stdin]
    status = main(argv)
    captured = capsys.readouterr()
    assert captured.err == "", captured.err
    result = json.loads(captured.out)
    assert (status, result["state"], result["fault"]) == (0, "HALTED", None)
    assert bytes.fromhex(result["output_hex"]) == expected


def test_fib_90_and_the_other_constants_are_what_the_examples_claim() -> None:
    # Independent checks of the expected values themselves.
    a, b = 0, 1
    for _ in range(90):
        a, b = b, a + b
    assert str(a).encode() + b"\n" == EXPECTED["fib"][1]
    factorial = 1
    for i in range(2, 21):
        factorial *= i
    assert str(factorial).encode() + b"\n" == EXPECTED["factorial"][1]
    sieve = bytearray([1]) * 10000
    sieve[0:2] = b"\0\0"
    for i in range(2, 100):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, 10000, i)))
    assert str(sum(sieve)).encode() + b"\n" == EXPECTED["sieve"][1]
    low, high = 1, 0
    for byte in b"Wikipedia":
        low = (low + byte) % 65521
        high = (high + low) % 65521
    assert str(high << 16 | low).encode() + b"\n" == EXPECTED["checksum"][1]
