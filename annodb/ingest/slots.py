"""Shared memory between the writer and its reading process (database._reader_main): a
batch's arrays and stored documents cross in a slot of a memory file both map, not
through the pipe, which carries only a small message naming the slot.

Through the pipe a batch (~20 MB at 8 MiB of input) was copied four times: into the
pipe's kernel pages (allocated for each write), out of them, and into the unpickler's
objects; ~1.2 GB at 1x cost the reading process ~1.1 s of CPU and the writer ~0.9 s.
Here the reading process copies each buffer into a slot once (pickle's out-of-band
buffers, protocol 5) and the writer copies it out once into objects of its own (so a
slot is free again at once, whatever the writer keeps; it acknowledges each slot with a
byte on the child's stdin, and the child waits for it before reusing the slot).

Linux only (os.memfd_create: anonymous, nothing left behind by a kill); elsewhere, or for
a message bigger than a slot, the batch goes through the pipe as before.
"""

from __future__ import annotations

import mmap
import os
import pickle
from dataclasses import replace

SLOTS = 2                  # batches in shared memory at once (the child runs this far ahead)
MAX_SLOT = 256 << 20       # no slot bigger than this: a bigger batch goes through the pipe


def slot_bytes(batch_bytes: int) -> int:
    """A slot's size for batches of batch_bytes of input (a batch's arrays and documents
    take ~2.4x its input; a bigger one goes through the pipe)."""
    return min(MAX_SLOT, max(1 << 20, 4 * int(batch_bytes)))


class Slots:
    """SLOTS slots of `size` bytes in a memory file (its descriptor `fd`), mapped."""

    def __init__(self, fd: int, size: int, count: int = SLOTS, *, owner: bool = False):
        self.fd, self.size, self.count = fd, size, count
        self.owner = owner
        self.map = mmap.mmap(fd, size * count)
        self.sent = 0       # (child) messages put in slots
        self.acked = 0      # (child) acknowledgements read

    @classmethod
    def create(cls, batch_bytes: int) -> Slots | None:
        """The writer's slots (its descriptor to hand the child), or None where there is
        no memfd (then the pipe carries everything)."""
        memfd = getattr(os, "memfd_create", None)
        if memfd is None:
            return None
        size = slot_bytes(batch_bytes)
        try:
            fd = memfd("annodb-ingest")
        except OSError:
            return None
        try:
            os.ftruncate(fd, size * SLOTS)
            return cls(fd, size, owner=True)
        except (OSError, ValueError):
            os.close(fd)
            return None

    def spec(self) -> tuple[int, int, int]:
        """What the child needs to map them (see attach)."""
        return self.fd, self.size, self.count

    @classmethod
    def attach(cls, spec) -> Slots:
        """The child's view of the writer's slots (its descriptor passed to it)."""
        fd, size, count = spec
        return cls(fd, size, count)

    def close(self) -> None:
        self.map.close()
        if self.owner:
            os.close(self.fd)

    # the child's side
    def put(self, obj, acknowledged) -> tuple | None:
        """The message ("slot", ...) that stands for `obj` (a stages.packed chunk), its
        buffers copied into the next slot once `acknowledged()` (which reads one byte,
        b"" at the end) says the writer is done with that slot; None when they do not
        fit (send obj itself)."""
        made = obj[2]   # (problems, lines, batch, tell): the batch's documents out of band
        if made is not None and isinstance(made.raws, bytes):
            obj = obj[:2] + (replace(made, raws=pickle.PickleBuffer(made.raws)),) + obj[3:]
        buffers: list = []
        head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
        if sum(v.nbytes for v in views) > self.size:
            return None
        while self.acked < self.sent - self.count + 1:
            if not acknowledged():
                raise BrokenPipeError("the writer stopped reading")
            self.acked += 1
        slot = self.sent % self.count
        at = slot * self.size
        sizes = []
        with memoryview(self.map) as whole:
            for v in views:
                whole[at:at + v.nbytes] = v
                at += v.nbytes
                sizes.append((v.nbytes, v.readonly))
        self.sent += 1
        return "slot", (slot, head, sizes)

    # the writer's side
    def take(self, value: tuple):
        """What the child put for the message ("slot", value): its buffers copied out
        (bytes where pickle would give bytes, else bytearray), so the slot is free."""
        slot, head, sizes = value
        at = slot * self.size
        buffers: list = []
        with memoryview(self.map) as whole:
            for n, readonly in sizes:
                part = whole[at:at + n]
                buffers.append(bytes(part) if readonly else bytearray(part))
                part.release()
                at += n
        return pickle.loads(head, buffers=buffers)
