"""The search engine: every index of every database, live indexing, background scans, state.

Indexes belong to the database (``Database.id``) where FT.CREATE ran, so tenants never see each
other's indexes. The engine never imports the server: the server tells it about key changes
(``key_changed``, ``database_reset``), hands it a ``scheduler`` to run work later on the event
loop and a ``values`` function to read a key's live value, and calls it from the FT.* commands.

Live indexing: a changed key is queued and indexed before the next FT.* command runs, or at the
next loop turn, whichever comes first, so a pipeline ``HSET ... FT.SEARCH`` sees its own write and a
burst of writes to one key is indexed once. The initial scan of FT.CREATE (and the rebuild after
a restart) runs in slices of a few milliseconds per loop turn, so other clients are not stalled;
``indexing``/``percent_indexed`` report it. HNSW graphs fill in their builder threads.

Freezing: while a query runs in slices on the loop (the server's ``slices`` module), its index is
``freeze``-d: queued keys it covers stay queued and its scan waits, so nothing it iterates changes
between two slices; ``thaw`` applies what waited at the next loop turn.

Component hooks for the server assembly (#14): ``start``, ``stop``, ``info``, ``metrics``,
``dump``/``load`` (the snapshot extension).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from pion.protocol.errors import ReplyError
from pion.storage.serialize import pack_tree, unpack_tree
from pion.vector import ft_config, schema
from pion.vector.cursors import CursorStore
from pion.vector.index import SearchIndex

log = logging.getLogger("pion.search")

#: how long one slice of a background scan may hold the event loop
SCAN_SLICE_SECONDS = 0.004
#: RediSearch's FT.CONFIG options (name -> value as FT.CONFIG GET shows it): ``ft_config.py``
CONFIG_DEFAULTS: dict[str, str] = ft_config.DEFAULTS
NOT_FOUND = "Unknown Index name"  # FT.DROPINDEX, FT.TAGVALS
#: FT.INFO, FT.ALTER and the synonym commands spell it so in RediSearch 2.10
UNKNOWN_INDEX = "Unknown index name"
#: names of Pion-owned indexes (semantic cache, agent memory): never listed by FT._LIST and not
#: creatable by clients, so they cannot collide with or displace a user's index
INTERNAL_PREFIX = "__pion:"


def not_found(name: str | None = None) -> ReplyError:
    return ReplyError(NOT_FOUND if name is None else f"{name}: no such index")


class _Scan:
    """The initial (or rebuild) scan of one index over a snapshot of the database's keys."""

    def __init__(self, index: SearchIndex, keys: list[bytes]) -> None:
        self.index = index
        self.keys = keys
        self.pos = 0
        self.cancelled = False


class SearchEngine:
    def __init__(self) -> None:
        self.indexes: dict[tuple[int, str], SearchIndex] = {}
        self.aliases: dict[tuple[int, str], str] = {}
        self.config: dict[str, str] = dict(CONFIG_DEFAULTS)
        self.dicts: dict[str, set[str]] = {}
        self.synonyms: dict[tuple[int, str], dict[str, set[str]]] = {}
        #: db id -> (db, keys in the order they changed: doc ids follow write order)
        self._dirty: dict[int, tuple[Any, dict[bytes, None]]] = {}
        self._flush_scheduled = False
        self._scans: list[_Scan] = []
        self._scan_scheduled = False
        self.rebuild_pending = False
        #: set by the server: run a callable later on the event loop (None: run at once)
        self.scheduler: Callable[[Callable[[], None]], None] | None = None
        #: set by the server: the live value of a key in a database, without side effects
        self.values: Callable[[Any, bytes], Any] = lambda db, key: db.data.get(key)
        #: set by the server: True while the keyspace is being loaded (replay, snapshot)
        self.loading: Callable[[], bool] = lambda: False
        #: set by the server: database objects by id (for rebuilds)
        self.databases: Callable[[], Iterable[Any]] = lambda: ()
        self.stats = {"indexed_keys": 0, "scans_done": 0}
        self.cursors = CursorStore()
        #: index -> queries in slices reading it (``freeze``/``thaw``): no indexing meanwhile
        self.frozen: dict[SearchIndex, int] = {}
        #: set by the server: the data directory, where HNSW graphs are saved (None: not saved)
        self.graph_dir: str | None = None
        #: the next rebuild follows a snapshot load: try the saved graphs first
        self._restore_graphs = False
        #: fields whose graph a start loaded / had to rebuild (no file, or one refused), files
        #: refused (damaged, other parameters), graph files written
        self.graph_stats = {"loaded": 0, "rebuilt": 0, "refused": 0, "saved": 0}

    # -- component hooks ------------------------------------------------------------------------

    def start(self) -> None:
        """After the keyspace is loaded: (re)build every index from it, from the saved HNSW
        graphs where they check out (``graph_store``)."""
        self._restore_graphs = True
        self.rebuild_all()

    def stop(self) -> None:
        for scan in self._scans:
            scan.cancelled = True
        self._scans.clear()
        for index in self.indexes.values():
            index.close()

    def info(self) -> dict[str, Any]:
        visible = [i for i in self.indexes.values() if not i.hidden]
        return {
            "search_number_of_indexes": len(visible),
            "search_number_of_internal_indexes": len(self.indexes) - len(visible),
            "search_indexing": int(bool(self._scans)),
            "search_used_memory_indexes": self.memory_bytes(),
            "search_used_memory_vector_index": sum(i.vector_bytes() for i in self.indexes.values()),
            "search_total_indexing_time": round(sum(i.indexing_time for i in self.indexes.values()) * 1000, 3),
            "search_hnsw_backlog": self.hnsw_backlog(),
            "search_hnsw_graphs_loaded": self.graph_stats["loaded"],
            "search_hnsw_graphs_rebuilt": self.graph_stats["rebuilt"],
            "search_hnsw_graph_files_refused": self.graph_stats["refused"],
            "search_hnsw_graph_files_saved": self.graph_stats["saved"],
            "search_hnsw_vectors_restored": sum(v.restored for i in self.indexes.values() for v in i.vectors.values()),
            "search_hnsw_vectors_dropped": sum(v.dropped for i in self.indexes.values() for v in i.vectors.values()),
            "search_hnsw_vectors_built": sum(v.graph.added for i in self.indexes.values() for v in i.vectors.values()
                                             if v.graph is not None),
            "search_indexing_failures": sum(i.failures for i in self.indexes.values()),
        }

    def expire_temporary(self) -> list[str]:
        """Drop TEMPORARY indexes idle longer than their timeout (the server cron calls this)."""
        now = time.monotonic()
        gone = []
        for (db_id, name), index in list(self.indexes.items()):
            ttl = index.definition.temporary
            if ttl and now - index.touched > ttl and index not in self.frozen:
                del self.indexes[(db_id, name)]
                for alias in [a for a, t in self.aliases.items() if a[0] == db_id and t == name]:
                    del self.aliases[alias]
                self.cursors.drop_index(index)
                index.close()
                gone.append(name)
        return gone

    def metrics(self) -> dict[str, float]:
        return {key: float(value) for key, value in self.info().items()}

    def memory_bytes(self) -> int:
        return sum(i.memory_bytes() for i in self.indexes.values())

    def memory_bytes_where(self, owns_db: Callable[[int], bool]) -> int:
        """The bytes of the indexes over databases ``owns_db`` accepts (a tenant's, for its quota)."""
        return sum(i.memory_bytes() for (db_id, _), i in self.indexes.items() if owns_db(db_id))

    def hnsw_backlog(self) -> int:
        total = 0
        for index in self.indexes.values():
            for vec in index.vectors.values():
                if vec.graph is not None:
                    # rows a compressed SVS-VAMANA field holds until TRAINING_THRESHOLD are not
                    # the builder's backlog (they wait for more rows, scanned exactly meanwhile)
                    waiting = getattr(vec.graph, "waiting", None)
                    total += max(len(vec.graph.pending_slots(vec.slot_ver)) - (waiting() if waiting else 0), 0)
        return total

    # -- lookup ---------------------------------------------------------------------------------

    def resolve(self, db_id: int, name: str) -> SearchIndex | None:
        index = self.indexes.get((db_id, name))
        if index is None:
            target = self.aliases.get((db_id, name))
            if target is not None:
                index = self.indexes.get((db_id, target))
        return index

    def get(self, db: Any, name: str, search_error: bool = False, error: str | None = None) -> SearchIndex:
        """The index (or alias) ``name``; missing: ``name: no such index`` (``search_error``), ``error``,
        else ``Unknown Index name`` (each command's RediSearch text)."""
        self.catch_up()
        index = self.resolve(db.id, name)
        if index is None:
            raise ReplyError(error) if error else not_found(name if search_error else None)
        return index

    def list_names(self, db: Any, include_hidden: bool = False) -> list[str]:
        return [i.name for (db_id, _), i in self.indexes.items() if db_id == db.id and (include_hidden or not i.hidden)]

    def in_db(self, db_id: int) -> list[SearchIndex]:
        return [i for (d, _), i in self.indexes.items() if d == db_id]

    # -- admin ----------------------------------------------------------------------------------

    def create(self, db: Any, argv: list[bytes], hidden: bool = False) -> SearchIndex:
        """FT.CREATE; ``hidden`` makes a Pion-owned index, whose name must start with
        ``INTERNAL_PREFIX`` (a client's FT.CREATE of such a name is refused)."""
        definition = schema.parse_create(argv)
        if definition.name.startswith(INTERNAL_PREFIX) != hidden:
            raise ReplyError(f"Index names starting with {INTERNAL_PREFIX} are reserved for Pion's own indexes"
                             if not hidden else f"A Pion-owned index name must start with {INTERNAL_PREFIX}")
        key = (db.id, definition.name)
        if key in self.indexes:
            raise ReplyError("Index already exists")
        if key in self.aliases:
            raise ReplyError("Alias conflicts with an existing index name")
        index = SearchIndex(definition, db.id, hidden=hidden)
        index.config = self.config
        if definition.filter:
            from pion.vector.expressions import document_filter

            index.filter = document_filter(definition.filter, definition)
        self.indexes[key] = index
        if not definition.skip_initial_scan:
            self._begin_scan(index, db)
        return index

    def alter(self, db: Any, name: str, argv: list[bytes]) -> None:
        index = self.get(db, name, error=UNKNOWN_INDEX)
        specs = schema.parse_alter(index.definition, argv)
        index.add_fields(specs)
        index.definition.history.append(list(argv))
        if not any(a.upper() == b"SKIPINITIALSCAN" for a in argv[2:4]):
            index.clear()
            self._begin_scan(index, db)

    def reindex(self, db: Any, index: SearchIndex) -> None:
        """Index every document again (a synonym group changed, FT.ALTER added fields)."""
        index.clear()
        self._begin_scan(index, db)

    def drop(self, db: Any, name: str) -> SearchIndex:
        index = self.get(db, name)
        del self.indexes[(db.id, index.name)]
        for alias in [a for a, target in self.aliases.items() if a[0] == db.id and target == index.name]:
            del self.aliases[alias]
        self.synonyms.pop((db.id, index.name), None)
        self.cursors.drop_index(index)
        for scan in self._scans:
            if scan.index is index:
                scan.cancelled = True
        index.close()
        return index

    def alias_add(self, db: Any, alias: str, name: str, update: bool = False) -> None:
        index = self.get(db, name, error=UNKNOWN_INDEX + " (or name is an alias itself)")
        key = (db.id, alias)
        if key in self.indexes:
            raise ReplyError("Alias conflicts with an existing index name")
        if key in self.aliases and not update:
            raise ReplyError("Alias already exists")
        self.aliases[key] = index.name

    def alias_del(self, db: Any, alias: str) -> None:
        if self.aliases.pop((db.id, alias), None) is None:
            raise ReplyError("Alias does not exist")

    # -- freezing (queries in slices) ---------------------------------------------------------

    def freeze(self, index: SearchIndex) -> None:
        """A query reading ``index`` runs in slices: index nothing into it until ``thaw``."""
        self.frozen[index] = self.frozen.get(index, 0) + 1

    def thaw(self, index: SearchIndex) -> None:
        """That query ended: what waited is applied at the next loop turn."""
        count = self.frozen.get(index, 0) - 1
        if count > 0:
            self.frozen[index] = count
            return
        self.frozen.pop(index, None)
        if self.scheduler is None:
            return
        if self._dirty and not self._flush_scheduled:
            self._flush_scheduled = True
            self.scheduler(self.catch_up)
        if self._scans and not self._scan_scheduled:
            self._scan_scheduled = True
            self.scheduler(self._scan_tick)

    # -- live indexing --------------------------------------------------------------------------

    def key_changed(self, db: Any, key: bytes) -> None:
        """The server's key signal: queue the key for every index of its database."""
        if not self.indexes:
            return
        if self.loading():
            self.rebuild_pending = True
            return
        entry = self._dirty.get(db.id)
        if entry is None:
            entry = self._dirty[db.id] = (db, {})
        keys = entry[1]
        if key in keys:
            del keys[key]  # re-inserted: the last change decides the order
        keys[key] = None
        if not self._flush_scheduled and self.scheduler is not None:
            self._flush_scheduled = True
            self.scheduler(self.catch_up)

    def database_reset(self, db: Any, how: str = "swap") -> None:
        """FLUSHDB/FLUSHALL drop the database's indexes and the FT.DICT* dictionaries, as RediSearch
        does (its flush event clears both); SWAPDB (new contents under the same indexes) rebuilds them."""
        self._dirty.pop(db.id, None)
        indexes = self.in_db(db.id)
        if how == "flush":
            for index in indexes:
                self.drop(db, index.name)
            self.dicts.clear()
            return
        for scan in self._scans:
            if scan.index in indexes:
                scan.cancelled = True
        for index in indexes:
            index.clear()
        if indexes:
            if self.loading():
                self.rebuild_pending = True
            else:
                for index in indexes:
                    self._begin_scan(index, db)

    def catch_up(self) -> None:
        """Index the queued keys now (FT.* commands call this first); start a pending rebuild."""
        self._flush_scheduled = False
        frozen = self.frozen
        if self.rebuild_pending and not self.loading() and not frozen:
            self.rebuild_all()
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        for db_id, (db, keys) in dirty.items():
            indexes = self.in_db(db_id)
            if not indexes:
                continue
            for key in keys:
                value = self.values(db, key)
                for index in indexes:
                    if index.definition.covers(key):
                        if frozen and index in frozen:  # a query in slices reads it: after it (thaw)
                            self._dirty.setdefault(db_id, (db, {}))[1][key] = None
                            continue
                        index.index_key(key, value)
                        self.stats["indexed_keys"] += 1

    # -- scans ----------------------------------------------------------------------------------

    def rebuild_all(self) -> None:
        self.rebuild_pending = False
        self._dirty.clear()
        restore, self._restore_graphs = self._restore_graphs, False
        dbs = {db.id: db for db in self.databases()}
        for index in list(self.indexes.values()):
            db = dbs.get(index.db_id)
            index.clear()
            if db is not None:
                if restore:
                    self._load_graphs(index)
                self._begin_scan(index, db)

    def _load_graphs(self, index: SearchIndex) -> None:
        """Give each HNSW field of a just-loaded index its saved graph, if one checks out."""
        from pion.vector import graph_store

        if self.graph_dir is None or index.definition.temporary:
            return
        for name, vec in index.vectors.items():
            if vec.graph is None:
                continue
            started = time.perf_counter()
            try:
                loaded = graph_store.read(self.graph_dir, index.db_id, index.name, name, vec.params)
            except graph_store.GraphFileError as exc:
                self.graph_stats["rebuilt"] += 1
                if str(exc) != "no saved graph":
                    self.graph_stats["refused"] += 1
                    log.warning("HNSW graph of %s.%s rebuilt from the documents: %s", index.name, name, exc)
                continue
            if vec.adopt_graph(loaded):
                self.graph_stats["loaded"] += 1
                log.info("HNSW graph of %s.%s loaded: %d entries in %.3f s", index.name, name, len(loaded.index),
                         time.perf_counter() - started)
            else:
                self.graph_stats["rebuilt"] += 1

    def graph_files(self) -> Callable[[str], None] | None:
        """At a snapshot's consistent point (on the loop): capture which key owns each graph
        entry, and return the job that writes the graph files (on the save's worker thread)."""
        from pion.vector import graph_store

        images: list[graph_store.GraphImage] = []
        keep: set[str] = set()
        for (db_id, name), index in self.indexes.items():
            if index.definition.temporary:
                continue
            for field_name, vec in index.vectors.items():
                if vec.graph is None:
                    continue
                if vec.restoring():  # its file still has entries not claimed yet: keep it
                    keep.add(graph_store.file_name(db_id, name, field_name))
                    continue
                slots, keys = vec.graph_image(index.docs)
                images.append(graph_store.GraphImage(db_id, name, field_name, vec.params, vec.graph, slots, keys))

        def job(directory: str) -> None:
            self.graph_stats["saved"] += graph_store.write(directory, images, keep)

        return job

    def _begin_scan(self, index: SearchIndex, db: Any) -> None:
        if self.loading():  # the keyspace is not complete yet: rebuild once it is
            self.rebuild_pending = True
            return
        for scan in self._scans:
            if scan.index is index:
                scan.cancelled = True
        keys = list(db.data)  # one C-level copy; the prefix test runs in the scan's slices
        scan = _Scan(index, keys)
        index.indexing = True
        index.scan_total = len(keys)
        index.scan_done = 0
        self._scans.append(scan)
        scan.db = db  # type: ignore[attr-defined]
        if self.scheduler is None:
            while self._scan_step(time.perf_counter() + 3600):
                pass
        elif not self._scan_scheduled:
            self._scan_scheduled = True
            self.scheduler(self._scan_tick)
        if not keys:
            self._scan_step(time.perf_counter())

    def _scan_tick(self) -> None:
        self._scan_scheduled = False
        if self._scan_step(time.perf_counter() + SCAN_SLICE_SECONDS) and self.scheduler is not None:
            self._scan_scheduled = True
            self.scheduler(self._scan_tick)

    def _scan_step(self, deadline: float) -> bool:
        """Index keys until ``deadline``; True while scans remain."""
        self.catch_up_writes_only()
        while self._scans:
            scan = self._scans[0]
            if scan.cancelled:
                self._scans.pop(0)
                continue
            if self.frozen and scan.index in self.frozen:  # a query in slices reads it: wait (thaw)
                waiting = [s for s in self._scans if not s.cancelled and s.index not in self.frozen]
                if not waiting:
                    return False
                self._scans.remove(waiting[0])
                self._scans.insert(0, waiting[0])
                continue
            index = scan.index
            db = scan.db  # type: ignore[attr-defined]
            keys = scan.keys
            covers = index.definition.covers
            while scan.pos < len(keys):
                key = keys[scan.pos]
                scan.pos += 1
                if covers(key):
                    index.index_key(key, self.values(db, key))
                if (scan.pos & 63) == 0 and time.perf_counter() >= deadline:
                    index.scan_done = scan.pos
                    return True
            index.scan_done = scan.pos
            index.indexing = False
            index.scan_finished()
            self.stats["scans_done"] += 1
            self._scans.pop(0)
            if time.perf_counter() >= deadline:
                return bool(self._scans)
        return False

    def catch_up_writes_only(self) -> None:
        if self._dirty:
            rebuild, self.rebuild_pending = self.rebuild_pending, False
            self.catch_up()
            self.rebuild_pending = rebuild

    def complete_scan(self, index: SearchIndex) -> None:
        """Finish ``index``'s pending scan now, inline (a Pion-owned index must not answer half built)."""
        for scan in self._scans:
            if scan.index is index and not scan.cancelled:
                covers = index.definition.covers
                db = scan.db  # type: ignore[attr-defined]
                for key in scan.keys[scan.pos:]:
                    if covers(key):
                        index.index_key(key, self.values(db, key))
                scan.pos = index.scan_done = len(scan.keys)
                scan.cancelled = True
                index.indexing = False
                index.scan_finished()
                self.stats["scans_done"] += 1

    def scanning(self, index: SearchIndex) -> bool:
        return any(scan.index is index and not scan.cancelled for scan in self._scans)

    # -- snapshot extension ---------------------------------------------------------------------

    def dump(self) -> bytes:
        """Definitions (as their argv), aliases, synonyms, dictionaries and FT.CONFIG."""
        return pack_tree({
            b"v": 1,
            b"indexes": [(db_id, int(index.hidden), [list(a) for a in index.definition.history])
                         for (db_id, _), index in self.indexes.items() if not index.definition.temporary],
            b"aliases": [(db_id, alias.encode(), target.encode()) for (db_id, alias), target in self.aliases.items()],
            b"config": {k.encode(): v.encode() for k, v in self.config.items()},
            b"dicts": {k.encode(): sorted(w.encode() for w in v) for k, v in self.dicts.items()},
            b"synonyms": [(db_id, name.encode(), {g.encode(): sorted(t.encode() for t in terms) for g, terms in groups.items()})
                          for (db_id, name), groups in self.synonyms.items()],
        })

    def load(self, data: bytes) -> None:
        state = unpack_tree(data)
        for index in self.indexes.values():
            index.close()
        self.indexes.clear()
        self.aliases.clear()
        self._scans.clear()

        class _Db:
            def __init__(self, db_id: int) -> None:
                self.id = db_id
                self.data: dict = {}

        for db_id, hidden, history in state.get(b"indexes", []):
            db = _Db(db_id)
            index = self.create(db, history[0], hidden=bool(hidden))
            for argv in history[1:]:
                if argv[0].upper() == b"FT.SYNUPDATE":
                    terms = [t.decode() for t in argv[3:] if t.upper() != b"SKIPINITIALSCAN"]
                    index.update_synonyms(argv[2].decode(), terms)
                    index.definition.history.append(list(argv))
                else:
                    self.alter(db, index.name, argv)
        self._scans.clear()
        for db_id, alias, target in state.get(b"aliases", []):
            self.aliases[(db_id, alias.decode())] = target.decode()
        self.config.update({k.decode(): v.decode() for k, v in state.get(b"config", {}).items()
                            if k.decode() in ft_config.BY_NAME})  # an older snapshot's DEFAULT_SCORER is dropped
        self.dicts = {k.decode(): {w.decode() for w in v} for k, v in state.get(b"dicts", {}).items()}
        self.synonyms = {(db_id, name.decode()): {g.decode(): {t.decode() for t in terms} for g, terms in groups.items()}
                         for db_id, name, groups in state.get(b"synonyms", [])}
        self.rebuild_pending = True
        self._restore_graphs = True
