"""One SQLite file served by one worker thread that owns its connection.

The event loop never calls SQLite: it hands the worker a function and awaits its result
(``run``, ``transaction`` and the ``execute``/``fetchone``/``fetchall`` helpers). The
connection is opened on the worker with ``check_same_thread`` on, so a call from any
other thread fails at once instead of blocking the loop.

Group commit: the worker takes every job queued while it was busy, runs all the
writes among them (``transaction``) in one transaction, each in its own savepoint so one
failing write fails alone, commits once, and only then answers their callers; the other
jobs run after that commit, in order, outside any transaction.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from butler.storage._files import private_file, private_folder
from butler.storage._schema import schema_version
from internal.protocol.a2a.model import Unavailable

log = logging.getLogger("butler.storage")

T = TypeVar("T")
P = ParamSpec("P")
Setup = Callable[[sqlite3.Connection], None]
# Jobs taken in one round at most: bounds one transaction, and the wait of a read queued
# behind a burst of writes.
MAX_JOBS_PER_ROUND = 1024


class CannotOpen(Unavailable, OSError):
    """A database could not be opened (its folder, file, or schema); names the file. An
    ``OSError`` too, as most causes are: start-up reports it with binding errors."""

    def __init__(self, path: Path, cause: BaseException) -> None:
        Unavailable.__init__(self, "overloaded", f"cannot open {path}: {cause}")
        self.path = path

    def __str__(self) -> str:
        return self.message


class DatabaseClosed(Unavailable):
    """A job was handed to a database after ``close`` (the daemon is stopping)."""

    def __init__(self, name: str) -> None:
        super().__init__("overloaded", f"the {name} database is closed")


@dataclass(slots=True, eq=False)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    write: bool
    done: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


_STOP = _Job(lambda conn: None, (), write=False)


class Database:
    """``await Database.open(path, name=..., setup=...)``; jobs are ``fn(conn, *args)``.

    ``setup`` runs on the worker once, after WAL and ``synchronous=NORMAL`` are set: the
    schema. ``version``: the schema version ``setup`` writes; a file of a later one is
    refused before anything is written to it (``schema_version``). ``pragmas`` are
    further ``PRAGMA`` statements for this connection.
    """

    def __init__(self, path: Path, *, name: str, setup: Setup | None = None,
                 version: int | None = None,
                 busy_timeout: float = 10.0, pragmas: tuple[str, ...] = (),
                 tighten_folder: bool = True, incremental_vacuum: bool = False) -> None:
        self.path = path
        self.name = name
        self._setup = setup
        self._version = version
        self._busy_timeout = busy_timeout
        self._pragmas = pragmas
        self._tighten_folder = tighten_folder
        self._incremental_vacuum = incremental_vacuum
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=f"storage-{name}",
                                        daemon=True)

    @classmethod
    async def open(cls, path: Path, *, name: str, **options: Any) -> Database:
        """``Database(...)`` then ``start()``."""
        db = cls(path, name=name, **options)
        await db.start()
        return db

    @classmethod
    def open_blocking(cls, path: Path, *, name: str, **options: Any) -> Database:
        """``open`` for code without an event loop (the CLI)."""
        _refuse_on_loop()
        db = cls(path, name=name, **options)
        db._thread.start()
        try:
            db._opened.result()
        finally:
            if db._opened.exception() is not None:
                db._thread.join()  # it has nothing left to do but return
        return db

    async def start(self) -> None:
        """Opens the file on the worker; raises what opening raised (the worker is then
        gone)."""
        self._thread.start()
        try:
            # Shielded: a cancelled caller must not cancel the worker's side of it.
            await asyncio.shield(asyncio.wrap_future(self._opened))
        except asyncio.CancelledError:
            self._request_close()  # the worker closes the file once it has opened it
            raise
        except BaseException:
            await asyncio.wrap_future(self._finished)
            self._thread.join()  # it has nothing left to do but return
            raise

    # -- the loop's side -------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the worker, outside any transaction."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    async def transaction(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` inside a write transaction (``BEGIN IMMEDIATE``), shared with
        the other writes queued meanwhile; returns once that transaction is committed."""
        return await asyncio.wrap_future(self.submit(fn, *args, write=True))

    async def execute(self, sql: str, params: Any = ()) -> int:
        """One write statement, group-committed; returns its row count."""
        return await self.transaction(_rowcount, sql, params)

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        return await self.run(_fetchone, sql, params)

    async def fetchall(self, sql: str, params: Any = ()) -> list[Any]:
        return await self.run(_fetchall, sql, params)

    def submit(self, fn: Callable[..., Any], *args: Any,
               write: bool = False) -> concurrent.futures.Future[Any]:
        """Queue a job from any thread; the future settles on the worker."""
        job = _Job(fn, args, write)
        if self._closing:
            job.done.set_exception(DatabaseClosed(self.name))
            return job.done
        self._jobs.put(job)
        return job.done

    # -- other threads (CLI, checkpointer) ---------------------------------------------

    def call(self, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        """``run`` (or ``transaction``) for a thread that may block: never the loop's."""
        _refuse_on_loop()
        result: T = self.submit(fn, *args, write=write).result()
        return result

    async def close(self) -> None:
        """Runs the jobs queued so far, closes the connection, and ends the worker."""
        if self._request_close():
            await asyncio.wrap_future(self._finished)
            self._thread.join()  # it has nothing left to do but return

    def close_blocking(self) -> None:
        _refuse_on_loop()
        if self._request_close():
            self._finished.result()
            self._thread.join()

    def _request_close(self) -> bool:
        """Whether there is a worker to wait for."""
        if not self._closing:
            self._closing = True
            self._jobs.put(_STOP)
        return self._thread.ident is not None

    # -- the worker ----------------------------------------------------------------

    def _serve(self) -> None:
        try:
            conn = self._connect()
        except Exception as exc:
            self._closing = True
            self._opened.set_exception(CannotOpen(self.path, exc))
            self._fail_queued(exc)
            self._finished.set_result(None)
            return
        self._opened.set_result(None)
        try:
            stopping = False
            while not stopping:
                jobs = [self._jobs.get()]
                while len(jobs) < MAX_JOBS_PER_ROUND:
                    try:
                        jobs.append(self._jobs.get_nowait())
                    except queue.Empty:
                        break
                stopping = any(job is _STOP for job in jobs)
                writes = [job for job in jobs if job.write]
                if writes:
                    _commit(conn, writes)
                for job in jobs:
                    if not job.write and job is not _STOP:
                        _call(conn, job)
        finally:
            try:
                conn.close()
            finally:
                self._fail_queued(DatabaseClosed(self.name))
                self._finished.set_result(None)

    def _connect(self) -> sqlite3.Connection:
        private_folder(self.path.parent, tighten=self._tighten_folder)
        private_file(self.path)
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_timeout)
        try:
            if self._version is not None:
                schema_version(conn, self.name, self._version)
            if self._incremental_vacuum:
                # Only a new, empty file takes it, and only before anything is written to
                # it, the switch to WAL included: freed pages then go back to the file
                # system (``PRAGMA incremental_vacuum``). An older file keeps its mode.
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a process crash (kill -9); only an OS crash or
            # power loss can roll back the last transactions (docs/tasks.md).
            conn.execute("PRAGMA synchronous=NORMAL")
            for pragma in self._pragmas:
                conn.execute(f"PRAGMA {pragma}")
            if self._setup is not None:
                self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _fail_queued(self, exc: BaseException) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not _STOP:
                job.done.set_exception(exc)


def _call(conn: sqlite3.Connection, job: _Job) -> None:
    if not job.done.set_running_or_notify_cancel():
        return
    try:
        result = job.fn(conn, *job.args)
    except BaseException as exc:
        if conn.in_transaction:  # a job that began its own transaction and failed
            conn.execute("ROLLBACK")
        job.done.set_exception(exc)
    else:
        job.done.set_result(result)


def _commit(conn: sqlite3.Connection, writes: list[_Job]) -> None:
    """One transaction for ``writes``; a lone write needs no savepoint."""
    outcomes: list[tuple[bool, Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for job in writes:
            if len(writes) > 1:
                conn.execute("SAVEPOINT job")
            try:
                outcomes.append((True, job.fn(conn, *job.args)))
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite rolled everything back: the whole batch fails
                if len(writes) == 1:
                    raise
                conn.execute("ROLLBACK TO job")
                outcomes.append((False, exc))
            if len(writes) > 1:
                conn.execute("RELEASE job")
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        for job in writes:
            _settle(job.done, False, exc)
        return
    for job, (ok, value) in zip(writes, outcomes, strict=True):
        _settle(job.done, ok, value)


def _settle(done: concurrent.futures.Future[Any], ok: bool, value: Any) -> None:
    """A write stands even when its caller stopped waiting (cancelled its future)."""
    try:
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)
    except concurrent.futures.InvalidStateError:
        pass


def _rowcount(conn: sqlite3.Connection, sql: str, params: Any) -> int:
    return conn.execute(sql, params).rowcount


def _fetchone(conn: sqlite3.Connection, sql: str, params: Any) -> Any:
    rows = conn.execute(sql, params).fetchmany(1)
    return rows[0] if rows else None


def _fetchall(conn: sqlite3.Connection, sql: str, params: Any) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def _refuse_on_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("a blocking database call on the event loop's thread; await it")
