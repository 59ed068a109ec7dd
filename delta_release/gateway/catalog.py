"""The catalog: tables (name, location, kind) and publications (generation -> Delta version).

`Catalog` is the seam; `SqliteCatalog` is the embedded default, a SQLite file in the lake. Publishing is
a compare-and-swap on the table's generation inside one IMMEDIATE transaction, so two publishers that
both expected generation g cannot both win.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import CatalogIntegrityError, GenerationConflictError, NotFoundError


@dataclass(frozen=True, slots=True, kw_only=True)
class TableEntry:
    name: str
    location: str
    kind: str
    origin: str = field(default="", compare=False)  # the catalog object it was read from, for messages


@dataclass(frozen=True, slots=True, kw_only=True)
class Publication:
    table: str
    generation: int
    version: int
    completed: str
    digest: str
    label: str | None = None
    origin: str = field(default="", compare=False)  # the catalog object it was read from, for messages


class Catalog(Protocol):
    def register(self, name: str, *, location: str, kind: str) -> TableEntry: ...
    def set_location(self, name: str, location: str) -> None: ...
    def reset_table(self, name: str, *, location: str, kind: str) -> None: ...
    def table(self, name: str) -> TableEntry | None: ...
    def tables(self) -> list[TableEntry]: ...
    def current(self, name: str) -> Publication | None: ...
    def publications(self, name: str) -> list[Publication]: ...
    def publish(self, name: str, *, expected_generation: int | None, version: int, digest: str,
                completed: str, label: str | None = None) -> Publication: ...


_DDL = """
CREATE TABLE IF NOT EXISTS tables (
    name TEXT PRIMARY KEY, location TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS publications (
    table_name TEXT NOT NULL, generation INTEGER NOT NULL, version INTEGER NOT NULL,
    completed TEXT NOT NULL, digest TEXT NOT NULL, label TEXT,
    PRIMARY KEY (table_name, generation));
"""


def _damaged(path: Path, exc: Exception) -> CatalogIntegrityError:
    return CatalogIntegrityError(f"the SQLite catalog {path} is damaged ({exc})", path=str(path),
                                 repair=f"restore {path} from a backup (`sqlite3 {path} .recover` may save what is "
                                 "left)")


class SqliteCatalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.created = not path.exists()  # this object made the file (Lake.open removes it if it refuses)
        self._held: sqlite3.Connection | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            con = sqlite3.connect(self.path, timeout=60)
            try:
                con.executescript(_DDL)
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise _damaged(path, exc) from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self._held is not None:  # inside `held()`: this thread already holds the write lock
            yield self._held
            return
        try:
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            try:
                con.execute("PRAGMA busy_timeout = 60000")
                con.execute("BEGIN IMMEDIATE")
                try:
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:  # a damaged file (truncated, garbled): refused, never exit 1
            if type(exc) is not sqlite3.DatabaseError:  # (locked, constraint...: not damage)
                raise
            raise _damaged(self.path, exc) from None

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the catalog's write lock (one IMMEDIATE transaction) for the block: no process publishes
        meanwhile; this object's reads in the block go through the held transaction (`catalog migrate`)."""
        with self._tx() as con:
            self._held = con
            try:
                yield
            finally:
                self._held = None

    def table_names(self) -> list[str]:
        """Every table with an entry or a publication."""
        with self._tx() as con:
            rows = con.execute("SELECT name FROM tables UNION SELECT DISTINCT table_name FROM publications")
            return sorted(str(r[0]) for r in rows)

    def register(self, name: str, *, location: str, kind: str) -> TableEntry:
        with self._tx() as con:
            row = con.execute("SELECT location, kind FROM tables WHERE name = ?", (name,)).fetchone()
            if row is None:
                con.execute("INSERT INTO tables VALUES (?, ?, ?)", (name, location, kind))
                return TableEntry(name=name, location=location, kind=kind)
        return TableEntry(name=name, location=row[0], kind=row[1])

    def set_location(self, name: str, location: str) -> None:
        with self._tx() as con:
            if con.execute("UPDATE tables SET location = ? WHERE name = ?", (location, name)).rowcount != 1:
                raise NotFoundError(f"table {name} is not in the catalog", table=name)

    def reset_table(self, name: str, *, location: str, kind: str) -> None:
        """Replace the table's entry, whatever it holds (`catalog repair`)."""
        with self._tx() as con:
            con.execute("INSERT OR REPLACE INTO tables VALUES (?, ?, ?)", (name, location, kind))

    def table(self, name: str) -> TableEntry | None:
        with self._tx() as con:
            row = con.execute("SELECT name, location, kind FROM tables WHERE name = ?", (name,)).fetchone()
        return None if row is None else TableEntry(name=row[0], location=row[1], kind=row[2],
                                                   origin=f"{self.path} (table {name})")

    def tables(self) -> list[TableEntry]:
        with self._tx() as con:
            rows = con.execute("SELECT name, location, kind FROM tables ORDER BY name").fetchall()
        return [TableEntry(name=r[0], location=r[1], kind=r[2], origin=f"{self.path} (table {r[0]})") for r in rows]

    @staticmethod
    def _pub(row: tuple[object, ...]) -> Publication:
        return Publication(table=str(row[0]), generation=int(row[1]), version=int(row[2]),  # type: ignore[call-overload]
                           completed=str(row[3]), digest=str(row[4]),
                           label=None if row[5] is None else str(row[5]))

    def current(self, name: str) -> Publication | None:
        with self._tx() as con:
            row = con.execute("SELECT * FROM publications WHERE table_name = ? ORDER BY generation DESC"
                              " LIMIT 1", (name,)).fetchone()
        return None if row is None else self._pub(row)

    def publications(self, name: str) -> list[Publication]:
        with self._tx() as con:
            rows = con.execute("SELECT * FROM publications WHERE table_name = ? ORDER BY generation",
                               (name,)).fetchall()
        return [self._pub(r) for r in rows]

    def publish(self, name: str, *, expected_generation: int | None, version: int, digest: str,
                completed: str, label: str | None = None) -> Publication:
        with self._tx() as con:
            row = con.execute("SELECT MAX(generation) FROM publications WHERE table_name = ?",
                              (name,)).fetchone()
            found = None if row is None or row[0] is None else int(row[0])
            if found != expected_generation:
                raise GenerationConflictError(name, expected_generation, found)
            generation = (found or 0) + 1
            con.execute("INSERT INTO publications VALUES (?, ?, ?, ?, ?, ?)",
                        (name, generation, version, completed, digest, label))
        return Publication(table=name, generation=generation, version=version, completed=completed,
                           digest=digest, label=label)


class MemoryCatalog:
    """An in-process catalog with the same contract as `SqliteCatalog` (embedding, scratch drills, tests).

    It is not shared between processes; a lake that several processes publish to needs `SqliteCatalog`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, TableEntry] = {}
        self._pubs: dict[str, list[Publication]] = {}

    def register(self, name: str, *, location: str, kind: str) -> TableEntry:
        with self._lock:
            return self._tables.setdefault(name, TableEntry(name=name, location=location, kind=kind))

    def set_location(self, name: str, location: str) -> None:
        with self._lock:
            entry = self._tables.get(name)
            if entry is None:
                raise NotFoundError(f"table {name} is not in the catalog", table=name)
            self._tables[name] = TableEntry(name=name, location=location, kind=entry.kind)

    def reset_table(self, name: str, *, location: str, kind: str) -> None:
        with self._lock:
            self._tables[name] = TableEntry(name=name, location=location, kind=kind)

    def table(self, name: str) -> TableEntry | None:
        with self._lock:
            return self._tables.get(name)

    def tables(self) -> list[TableEntry]:
        with self._lock:
            return sorted(self._tables.values(), key=lambda t: t.name)

    def current(self, name: str) -> Publication | None:
        with self._lock:
            pubs = self._pubs.get(name)
            return pubs[-1] if pubs else None

    def publications(self, name: str) -> list[Publication]:
        with self._lock:
            return list(self._pubs.get(name, []))

    def publish(self, name: str, *, expected_generation: int | None, version: int, digest: str,
                completed: str, label: str | None = None) -> Publication:
        with self._lock:
            pubs = self._pubs.setdefault(name, [])
            found = pubs[-1].generation if pubs else None
            if found != expected_generation:
                raise GenerationConflictError(name, expected_generation, found)
            pub = Publication(table=name, generation=(found or 0) + 1, version=version, completed=completed,
                              digest=digest, label=label)
            pubs.append(pub)
            return pub
