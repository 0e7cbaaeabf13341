"""The node's ed25519 signing key, kept in the kforge data directory.

The key lives in ``<data dir>/forge_ed25519.pem`` (PKCS#8 PEM, unencrypted),
created on first use with mode 0600 inside a directory with mode 0700.  The
data directory is ``$KFORGE_DATA_DIR`` if set, else ``~/.local/share/kforge``;
pass ``data_dir`` explicitly to keep tests and tools away from the real home.

Signing with this key attests *who* claims a result; it is not evidence that
the result is right.  Verification is re-execution (see :mod:`kforge.proofs`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from kforge.core import DATA_DIR_ENVIRONMENT, ErrorCategory, ForgeError, default_data_dir

__all__ = [
    "DATA_DIR_ENVIRONMENT",
    "KEY_FILE_NAME",
    "KeyFileError",
    "NodeKey",
    "default_data_dir",
    "load_or_create_key",
    "parse_public_key",
]

KEY_FILE_NAME: Final = "forge_ed25519.pem"


class KeyFileError(ForgeError):
    """A key file or public key that cannot be read, created or trusted."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class NodeKey:
    """An ed25519 key pair that signs proofs; the private half never leaves this object."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private_key = private_key
        self.public_key: Ed25519PublicKey = private_key.public_key()

    @classmethod
    def generate(cls) -> NodeKey:
        """A fresh random key (not stored anywhere)."""
        return cls(Ed25519PrivateKey.generate())

    @property
    def public_raw(self) -> bytes:
        """The 32-byte raw public key."""
        return self.public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def public_hex(self) -> str:
        """The raw public key as 64 lower-case hex digits."""
        return self.public_raw.hex()

    def public_pem(self) -> str:
        """The public key as a SubjectPublicKeyInfo PEM block."""
        return self.public_key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode(
            "ascii"
        )

    def sign(self, data: bytes) -> bytes:
        """The 64-byte ed25519 signature of ``data``."""
        return self._private_key.sign(data)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (for the key file only)."""
        return self._private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def _ensure_directory(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise KeyFileError(str(directory), f"cannot create: {error.strerror or error}") from None


def _read_key(path: Path) -> NodeKey:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(str(path), f"permissions {mode:04o} are too open (want 0600)")
    try:
        private_key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as error:
        raise KeyFileError(str(path), f"not a readable private key ({error})") from None
    if not isinstance(private_key, Ed25519PrivateKey):
        raise KeyFileError(str(path), "not an ed25519 private key")
    return NodeKey(private_key)


def _write_new_key(path: Path) -> NodeKey:
    key = NodeKey.generate()
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)  # another process created it first
    except OSError as error:
        raise KeyFileError(str(path), f"cannot create: {error.strerror or error}") from None
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key.private_pem())
    return key


def load_or_create_key(data_dir: str | os.PathLike[str] | None = None) -> NodeKey:
    """The node key in ``data_dir`` (default :func:`default_data_dir`), created on first use.

    Raises ``KeyFileError`` when the file is unreadable, not an ed25519 key, or
    readable by others than its owner.
    """
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    _ensure_directory(directory)
    path = directory / KEY_FILE_NAME
    if path.exists():
        return _read_key(path)
    return _write_new_key(path)


def parse_public_key(text: str) -> Ed25519PublicKey:
    """A public key from 64 hex digits, or from a file holding hex, PEM or 32 raw bytes.

    Raises ``KeyFileError`` naming the problem.
    """
    candidate = text.strip()
    if len(candidate) == 64:
        try:
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(candidate))
        except ValueError:
            pass
    try:
        blob = Path(text).read_bytes()
    except OSError as error:
        raise KeyFileError(
            text, f"neither 64 hex digits nor a readable file ({error.strerror})"
        ) from None
    return _public_key_from_blob(text, blob)


def _public_key_from_blob(source: str, blob: bytes) -> Ed25519PublicKey:
    if blob.lstrip().startswith(b"-----BEGIN"):
        try:
            key = load_pem_public_key(blob)
        except ValueError as error:
            raise KeyFileError(source, f"bad PEM public key ({error})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(source, "not an ed25519 public key")
        return key
    stripped = blob.strip()
    try:
        if len(stripped) == 64:
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(stripped.decode("ascii")))
        if len(blob) == 32:
            return Ed25519PublicKey.from_public_bytes(blob)
    except (ValueError, UnicodeDecodeError):
        pass
    raise KeyFileError(source, "not an ed25519 public key (want hex, PEM or 32 raw bytes)")
