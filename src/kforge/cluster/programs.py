"""Programs (and channel-3 objects) in the ``kforge_programs`` object store.

An object's name is its id: the SHA-256 of its bytes, 64 hex digits.  Whoever
reads one hashes what it got and refuses anything else (``VaultFetchFailed``),
so the object store is trusted for nothing: the content id is checked on every
read, as the SQLite vault does (:mod:`kforge.storage`).

A worker's engine reads programs synchronously from a :class:`~kforge.storage.Vault`;
its :class:`ObjectVault` is an in-memory vault that the partition fills from the
object store before the engine needs a program (:meth:`ObjectVault.fetch`: the
programs a request or a journal names), and whose new objects (linked programs,
channel-3 PUTs) are uploaded before the journal records that name them are written.
The gateway stores and reads programs with :func:`store_object` and :func:`fetch_object`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore

from kforge.core import Hash256, VaultFetchFailed
from kforge.storage import MEMORY, Vault

__all__ = ["ObjectVault", "fetch_object", "store_object"]

#: Objects larger than this are hashed in a thread (hashlib releases the GIL), so a
#: large program does not hold the event loop for milliseconds.
_HASH_IN_THREAD: Final = 64 * 1024


async def content_id(data: bytes) -> Hash256:
    """``Hash256.of(data)``, off the event loop when ``data`` is large."""
    if len(data) > _HASH_IN_THREAD:
        return await asyncio.to_thread(Hash256.of, data)
    return Hash256.of(data)


async def fetch_object(store: ObjectStore, object_id: Hash256) -> bytes:
    """The object named ``object_id``, its content id checked (``VaultFetchFailed``)."""
    try:
        found = await store.get(object_id.hex)
    except ObjectNotFoundError:
        raise VaultFetchFailed(object_id, "no such object in the cluster's object store") from None
    data = found.data or b""
    if await content_id(data) != object_id:
        raise VaultFetchFailed(object_id, "the stored bytes do not hash to the id (tampered)")
    return data


async def store_object(store: ObjectStore, data: bytes) -> Hash256:
    """Store ``data`` under its id (once: the same id is the same bytes)."""
    object_id = await content_id(data)
    try:
        await store.get_info(object_id.hex)
    except ObjectNotFoundError:
        await store.put(object_id.hex, data)
    return object_id


class ObjectVault(Vault):
    """A worker's vault: objects in memory, filled from and written through to the store."""

    def __init__(self, store: ObjectStore) -> None:
        super().__init__(MEMORY)
        self.store = store
        self._unsent: list[bytes] = []

    def put(self, data: bytes) -> Hash256:
        blob = bytes(data)
        object_id = Hash256.of(blob)
        if object_id not in self:
            self._unsent.append(blob)
        return super().put(blob)

    async def fetch(self, object_ids: Iterable[Hash256]) -> None:
        """Bring the objects named into the vault (each checked); a missing one is left
        missing, for the engine to refuse as it would any unknown program."""
        for object_id in dict.fromkeys(object_ids):
            if object_id in self:
                continue
            try:
                Vault.put(self, await fetch_object(self.store, object_id))
            except VaultFetchFailed:
                continue

    async def upload(self) -> None:
        """Store the objects put since the last upload (before the records naming them)."""
        while self._unsent:
            await store_object(self.store, self._unsent[0])
            self._unsent.pop(0)
