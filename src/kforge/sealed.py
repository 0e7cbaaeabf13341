"""Files a cache can trust after a crash: ``MAGIC | sha256(payload) | payload``.

A sealed file is written to a temporary file beside its final name and renamed into
place, so a reader never sees half a file and concurrent writers of the same name
each leave a whole one (the last rename wins).  :func:`unseal` answers ``None`` for
anything truncated, corrupted or of another magic, so a cache treats it as a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Final

#: The suffix of a sealed file being written (a crash may leave one behind).
PARTIAL_SUFFIX: Final = ".tmp"
_DIGEST_SIZE: Final = 32


def seal(magic: bytes, payload: bytes) -> bytes:
    """The bytes of a sealed file holding ``payload``."""
    return magic + hashlib.sha256(payload).digest() + payload


def unseal(magic: bytes, blob: bytes) -> bytes | None:
    """The payload of a sealed file whose magic and checksum are right, else ``None``."""
    header = len(magic) + _DIGEST_SIZE
    if len(blob) < header or not blob.startswith(magic):
        return None
    payload = blob[header:]
    if hashlib.sha256(payload).digest() != blob[len(magic) : header]:
        return None
    return payload


def write_sealed(path: Path, magic: bytes, payload: bytes) -> bool:
    """Write ``payload`` sealed at ``path`` (creating its folder); ``False`` when the disk
    refuses (read-only, full), which costs a cache only its next miss."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=PARTIAL_SUFFIX)
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(seal(magic, payload))
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        return False
    return True


def read_sealed(path: Path, magic: bytes) -> bytes | None:
    """The payload sealed at ``path``, or ``None`` when it is absent or damaged (a damaged
    file is removed, so the next writer replaces it)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    payload = unseal(magic, blob)
    if payload is None:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    return payload
