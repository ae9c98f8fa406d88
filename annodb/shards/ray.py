"""A sharded collection served by Ray actors, one per shard (`pip install 'annodb[ray]'`).

    db = annodb.shards.ray.open("web.shards")            # a local cluster unless connected
    with db.read() as r:
        r.search("(^ goth rock)", k=10)                   # a fan-out of actor calls

Each shard is opened read-only in an actor (a named one, `annodb:<path>:shard-000`, so
every process of a cluster shares it); a snapshot is a snapshot in every actor, and the
read interface is annodb.shards.ShardedSnapshot's over them, with its exact merge: the
same answers as the collection opened in process. Past one machine, start each node with a
resource naming the shards whose files it holds, and the actors go there:

    ray start --head --resources '{"annodb-shard-000": 1, "annodb-shard-001": 1}'
    ray start --address HEAD:6379 --resources '{"annodb-shard-002": 1, "annodb-shard-003": 1}'

(the same collection path on every node; a shard whose resource no node offers runs
anywhere). Writes go to the collection itself (annodb.open / annodb ingest on the node that
holds it); the actors' snapshots see them at the next read. Nothing here is imported by
annodb unless asked for.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ..errors import AnnodbError, NotFoundError, ShardLostError, StorageError
from . import collection as _shards
from .routing import Homes, identity
from .worker import Remote, ShardHost

if TYPE_CHECKING:
    import ray
else:
    ray = None  # the module, imported by _ray() (Ray is an optional extra)
LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's processes on 127.0.0.1 only


def _ray(local: bool = False):
    """Ray, imported on first use. A local cluster (none to connect to) keeps every Ray
    process on the loopback address, unless the environment says otherwise."""
    global ray
    if ray is None:
        if local:
            os.environ.setdefault(LOOPBACK, "0")
        try:
            import ray as module
        except ModuleNotFoundError:
            raise AnnodbError("Ray is not installed: pip install 'annodb[ray]'") from None
        ray = module
    return ray


def start_local(num_cpus: int | None = None) -> None:
    """Start a local Ray cluster with this machine's CPUs (or `num_cpus`), on loopback, its
    workers (the shards' actors) at the niceness of this process (Ray's default, 15, lets
    every other process go first: the server's queries would wait for them)."""
    os.environ.setdefault("RAY_worker_niceness", "0")
    _ray(local=True).init(num_cpus=num_cpus, namespace=NAMESPACE, include_dashboard=False,
                          log_to_driver=False, configure_logging=False)

CONCURRENCY = 4     # calls an actor serves at once (its own threads; LMDB readers)
RESTART_WAIT = 30.0  # seconds a snapshot waits for an actor Ray is restarting
NAMESPACE = "annodb"


def _get(refs, name: str):
    """ray.get(refs), an actor that died under the call a ShardLostError (Ray restarts it:
    actors are made with max_restarts=-1, and its snapshots are gone with it)."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayActorError as err:
        raise ShardLostError(f"{name}: the shard's Ray actor ended under this call "
                             f"({type(err).__name__}); Ray restarts it, and the "
                             "collection's next snapshot uses it") from None


class _Part(Remote):
    """One actor's snapshot (worker.Remote: a request is an actor call)."""

    def __init__(self, actor, sid: int, name: str):
        self.actor, self.sid, self.name = actor, sid, name

    def send(self, method: str, args: tuple, kwargs: dict):
        return self.actor.call.remote(self.sid, method, *args, **kwargs)

    def _answer(self, ticket):
        return _get(ticket, self.name)

    def document(self, docno: str):
        doc = _get(self.actor.document.remote(self.sid, docno), self.name)
        if doc is None:
            raise NotFoundError(f"no document with docno {docno!r}")
        return doc

    def text_scorer(self, container: str):
        return lambda nodes: _get(self.actor.score.remote(self.sid, container, nodes),
                                  self.name)

    def close(self) -> None:
        try:  # not waited for: every call of this snapshot has returned already
            self.actor.close.remote(self.sid)
        except Exception:  # noqa: BLE001 - the cluster went away: nothing is held then
            pass


class RayCollection:
    """A sharded collection whose reads run on Ray actors (see the module docstring)."""

    def __init__(self, path: str, manifest: dict, actors: list):
        self.path = path
        self.manifest = manifest
        self.fold_diacritics = bool(manifest.get("fold_diacritics", False))
        self.actors = actors
        self.shards = actors
        self.readonly = True
        self.homes = Homes(_shards.HOMES)
        self._pool = None
        self._closed = False

    ask = _shards.ShardedDatabase.ask    # the actors asked at once (their calls are async)
    each = _shards.ShardedDatabase.each  # (text scorers: on threads, a round trip each)
    threads = True
    workers: list = []

    def read(self) -> _shards.ShardedSnapshot:
        if self._closed:
            raise StorageError(f"{self.path}: collection is closed")
        sids = self._open_each()
        return _shards.ShardedSnapshot(self, [
            _Part(a, s, f"{self.path}/{_shards.shard_name(i)}")
            for i, (a, s) in enumerate(zip(self.actors, sids))])

    def _open_each(self) -> list[int]:
        """A snapshot in each actor, waiting up to RESTART_WAIT seconds for one that Ray is
        restarting."""
        deadline = time.monotonic() + RESTART_WAIT
        while True:
            try:
                return ray.get([a.open.remote() for a in self.actors])
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise StorageError(f"{self.path}: a shard's Ray actor is still "
                                       f"restarting after {RESTART_WAIT:g} s") from None
                time.sleep(0.05)
            except ray.exceptions.RayActorError as err:
                raise StorageError(f"{self.path}: a shard's Ray actor ended "
                                   f"({type(err).__name__}: {err})") from None

    def write(self, timeout: float | None = None):
        raise StorageError(f"{self.path}: served by Ray actors, read-only; write to the "
                           "collection itself (annodb.open, annodb ingest) on its node")

    def stats(self):
        with self.read() as r:
            return r.stats()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    def __enter__(self) -> "RayCollection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(path, *, address: str | None = None) -> RayCollection:
    """The collection at `path` on Ray actors: connects to the cluster at `address` (or
    starts a local one, with this machine's CPUs, unless Ray is initialised already) and
    starts (or finds) one actor per shard."""
    path = os.path.abspath(os.fspath(path))
    manifest = _shards.read_manifest(path)
    _ray(local=address is None)
    if not ray.is_initialized():
        if address is None:
            start_local()
        else:
            ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
    remote = ray.remote(ShardHost)
    offered = ray.cluster_resources()
    actors = []
    for i in range(manifest["shards"]):
        name = _shards.shard_name(i)
        where = f"annodb-{name}"
        options = dict(name=f"annodb:{path}:{name}", namespace=NAMESPACE, get_if_exists=True,
                       lifetime="detached", max_restarts=-1,  # (Ray restarts one that died)
                       max_concurrency=CONCURRENCY, num_cpus=0)
        if where in offered:
            options["resources"] = {where: 0.001}
        expect = None if manifest.get("id") is None else \
            identity(manifest["id"], i, manifest["shards"])   # (checked by the actor)
        actors.append(remote.options(**options).remote(os.path.join(path, name), None,
                                                        expect))
    return RayCollection(path, manifest, actors)


def stop(path) -> None:
    """End the actors serving the collection at `path` (they are detached: they outlive
    the process that started them, so other processes of the cluster share them)."""
    path = os.path.abspath(os.fspath(path))
    manifest = _shards.read_manifest(path)
    _ray()
    for i in range(manifest["shards"]):
        try:
            ray.kill(ray.get_actor(f"annodb:{path}:{_shards.shard_name(i)}",
                                   namespace=NAMESPACE))
        except ValueError:
            pass
