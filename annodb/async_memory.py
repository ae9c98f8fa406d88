"""AsyncMemory: annodb.Memory for asyncio programs, the same methods awaited.

    async with annodb.AsyncMemory("agent.db") as mem:
        await mem.remember("Alice lives in Berlin", key="alice/city")
        found = await mem.recall("where does Alice live?", k=3)

Each call runs Memory's method on a worker thread of its own (one per AsyncMemory, so its
calls run one at a time, in the order they were awaited), so the event loop goes on
while a recall ranks or a remember waits for the disk. Several AsyncMemory (or processes)
may share one database, as Memory may.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from .errors import StorageError
from .memory import Entry, History, Memory, Recalled

__all__ = ["AsyncMemory"]


class AsyncMemory:
    """An agent's memory (see annodb.Memory, which takes the same arguments) whose
    methods are coroutines that do not block the event loop."""

    def __init__(self, path, **options) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="annodb-memory")
        self._closed = False
        try:
            # opened on the worker thread too: every use of the database is from that thread
            self.memory: Memory = self._pool.submit(Memory, path, **options).result()
        except BaseException:
            self._pool.shutdown(wait=False)
            raise

    async def _run(self, method, *args, **kwargs):
        if self._closed:
            raise StorageError(f"{self.memory.db.path}: this AsyncMemory is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(method, *args,
                                                                        **kwargs))

    async def remember(self, text: str | None = None, /, **kwargs) -> str:
        return await self._run(self.memory.remember, text, **kwargs)

    async def remember_many(self, memories) -> list[str]:
        # (a list made here, where a generator is still the caller's to read; one string
        #  or dict goes as it is, for Memory to refuse)
        return await self._run(self.memory.remember_many, memories if isinstance(
            memories, (str, bytes, dict)) else list(memories))

    async def annotate(self, docno: str, label: str, value: float = 0.0) -> None:
        return await self._run(self.memory.annotate, docno, label, value)

    async def forget(self, docnos=None, *, where: dict | None = None):
        return await self._run(self.memory.forget, docnos, where=where)

    async def recall(self, query_or_text: str | None, k: int = 10,
                     where: dict | None = None, **kwargs) -> Recalled:
        return await self._run(self.memory.recall, query_or_text, k, where, **kwargs)

    async def history(self, n: int = 20, where: dict | None = None, **kwargs) -> History:
        return await self._run(self.memory.history, n, where, **kwargs)

    async def get(self, docno: str) -> Entry | None:
        return await self._run(self.memory.get, docno)

    async def filter(self, where: dict | None = None, **kwargs) -> str:
        return await self._run(self.memory.filter, where, **kwargs)

    async def reindex(self) -> int:
        return await self._run(self.memory.reindex)

    async def close(self) -> None:
        """Close the memory once the calls awaited before have run (a call made after
        this is an error; closing again does nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._pool, self.memory.close)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncMemory":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"annodb.AsyncMemory({self.memory.db.path!r})"


for _name in ("remember", "remember_many", "annotate", "forget", "recall", "history", "get",
              "filter", "reindex"):
    getattr(AsyncMemory, _name).__doc__ = getattr(Memory, _name).__doc__
