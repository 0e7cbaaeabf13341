"""The conformance corpus: where its programs are and what each is expected to do.

``corpus/GROUP/NAME.star`` is a program; ``corpus/GROUP/NAME.json`` beside it is the
oracle's answer for it (an :class:`~starlark.harness.Outcome`), written by ``regen.py``.
Files whose name starts with ``_`` are modules for ``load()``, not programs.

Groups listed in :data:`PENDING_GROUPS` hold programs kforge must still refuse (a
compile error, or a run-time error that names the missing feature); their expectations
are the Go answers all the same, so the step that adds the feature only has to
remove the group from that table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from starlark.harness import Outcome

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"

#: group -> (the word kforge's refusal must contain, why the group is pending)
PENDING_GROUPS: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class CorpusProgram:
    path: Path

    @property
    def group(self) -> str:
        return self.path.parent.name

    @property
    def name(self) -> str:
        return f"{self.group}/{self.path.stem}"

    @property
    def filename(self) -> str:
        """The file name the program is compiled under (what its tracebacks show)."""
        return self.path.name

    @property
    def expectation_path(self) -> Path:
        return self.path.with_suffix(".json")

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def expected(self) -> Outcome:
        return Outcome.from_json(json.loads(self.expectation_path.read_text(encoding="utf-8")))

    def load_module(self, name: str) -> str:
        """The source of a module named in ``load()``, relative to the program's directory."""
        return (self.path.parent / name).read_text(encoding="utf-8")

    def modules(self) -> dict[str, str]:
        """Every loadable module beside the program, by the name ``load()`` uses."""
        return {
            path.name: path.read_text(encoding="utf-8")
            for path in sorted(self.path.parent.glob("_*.star"))
        }


def corpus_programs() -> list[CorpusProgram]:
    return [
        CorpusProgram(path)
        for path in sorted(CORPUS_DIR.glob("*/*.star"))
        if not path.name.startswith("_")
    ]
