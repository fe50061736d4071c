"""Sealed segments of the audit log: exported to files, dropped past retention, and the
whole history verified from the exports and the live log (docs/audit.md#retention).

A segment is a run of records, sealed with its last record's seq and hash in
``audit_segments`` (by count as records are appended, ``schema.SEGMENT_RECORDS``, or by
``retire`` once its newest record is past retention). An export is a JSON Lines file,
``audit-<first seq>-<last seq>.jsonl`` (seqs zero-padded to 12 digits): a header line
``{"format": "butler-audit-segment/1", "first_seq", "last_seq", "prev_hash",
"last_hash"}``, then one line per record in ``AuditRecord.to_json()``'s shape: the
record's hashed text (RFC 8785, its detail as stored) with ``hash`` put in, so that
removing ``,"hash":"<hash>"`` gives back the text its hash is of. A dropped segment's
row stays: its hash is where the live log's chain starts.

Everything here blocks (the CLI; the daemon runs it in a thread): each page of records
is its own job on the audit database's worker, so appends go on between them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from butler.audit.log import AuditLog, VerifyResult, failed
from butler.audit.rows import hash_before, live_base, record_from_row
from butler.audit.schema import COLUMNS, GENESIS_HASH, seal
from butler.runtime.children import die_with_parent
from butler.storage import write_private
from internal.signing import Encoded, canonical

FORMAT: Final = "butler-audit-segment/1"
_PAGE: Final = 2048
_DROP_CHUNK: Final = 2000
_VACUUM_PAGES: Final = 512


@dataclass(frozen=True, slots=True)
class Segment:
    first_seq: int
    last_seq: int
    last_hash: str
    last_at: str
    dropped: bool

    @property
    def file_name(self) -> str:
        return f"audit-{self.first_seq:012d}-{self.last_seq:012d}.jsonl"


def segments(log: AuditLog) -> list[Segment]:
    rows = log.db.call(_fetch, "SELECT first_seq, last_seq, last_hash, last_at, dropped "
                       "FROM audit_segments ORDER BY last_seq", ())
    return [Segment(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows]


def export(log: AuditLog, segment: Segment, folder: Path) -> Path:
    """Write ``segment`` (still live) to ``folder``; an existing file is left as it is."""
    path = folder / segment.file_name
    if path.exists():
        return path
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    prev = log.db.call(hash_before, segment.first_seq)
    lines = [json.dumps({"format": FORMAT, "first_seq": segment.first_seq,
                         "last_seq": segment.last_seq, "prev_hash": prev,
                         "last_hash": segment.last_hash}, sort_keys=True)]
    after = segment.first_seq - 1
    while after < segment.last_seq:
        rows = log.db.call(_fetch, f"SELECT {COLUMNS} FROM audit WHERE seq > ? AND seq <= ? "
                           "ORDER BY seq LIMIT ?", (after, segment.last_seq, _PAGE))
        if not rows:
            raise FileNotFoundError(f"records {after + 1}..{segment.last_seq} are not in "
                                    "the live log")
        for row in rows:
            record = record_from_row(row)
            line = record.payload() | {"detail": Encoded(record.detail_text),
                                       "hash": record.hash}
            lines.append(canonical(line).decode())
        after = rows[-1][0]
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    write_private(partial, ("\n".join(lines) + "\n").encode("utf-8"))
    with open(partial, "rb") as written:
        os.fsync(written.fileno())  # on disk before its records may be dropped
    partial.rename(path)
    return path


def export_in_child(log: AuditLog, segment: Segment, folder: Path) -> Path:
    """``export``, run by a child process (``python -m butler.audit.segments``): the
    daemon's retention uses it, since encoding a segment is tens of thousands of records
    of Python that, on a thread of the daemon, would hold the interpreter's lock against
    its event loop (docs/performance.md#storage-at-scale). The child reads the file as
    another process would (WAL: it never waits for the appends)."""
    done = subprocess.run(
        [sys.executable, "-m", "butler.audit.segments", str(log.path), str(folder),
         str(segment.first_seq), str(segment.last_seq), segment.last_hash, segment.last_at],
        capture_output=True, text=True, check=False,
        preexec_fn=die_with_parent)  # the thread waits on it: it dies with the daemon
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"exporting audit records {segment.first_seq}..{segment.last_seq} "
                           f"failed: {why}")
    return Path(done.stdout.strip())


def retire(log: AuditLog, before: datetime, folder: Path,
           exporter: Callable[[AuditLog, Segment, Path], Path] = export) -> list[Path]:
    """Export (with ``exporter``), then drop, every segment whose newest record is older
    than ``before`` (sealing the open one first if all of it is); returns the files
    written.

    A segment is marked dropped once its file is on disk, before its records are
    deleted: the live log then starts after it at once, and records a crash left
    behind are deleted by the next pass (verify does not read them)."""
    cutoff = before.isoformat(timespec="microseconds")
    log.db.call(_seal_expired, cutoff, write=True)
    written = []
    for segment in segments(log):
        if segment.dropped or segment.last_at >= cutoff:
            continue
        written.append(exporter(log, segment, folder))
        log.db.call(_mark_dropped, segment.last_seq, write=True)
    while log.db.call(_drop_chunk, write=True):
        pass
    return written


def verify_history(log: AuditLog, folder: Path) -> VerifyResult:
    """The exports in ``folder`` from genesis up to the live log, then the live log."""
    live_from, live_hash = log.db.call(live_base)
    prev, seq, checked = GENESIS_HASH, 0, 0
    files = sorted(folder.glob("audit-*.jsonl"))
    for path in files:
        result = _verify_file(path, seq, prev)
        if isinstance(result, VerifyResult):
            return VerifyResult(False, checked + result.checked, result.first_bad_seq,
                                f"{path.name}: {result.reason}")
        checked += result[0] - seq
        seq, prev = result
        if seq >= live_from:
            break
    if seq < live_from:
        return failed(checked, seq + 1, f"no export holds records {seq + 1}..{live_from}")
    if seq > live_from:  # the exports run on into records still live: chain from there
        live = log.verify()
        return VerifyResult(live.ok, checked + live.checked, live.first_bad_seq, live.reason)
    if prev != live_hash:
        return failed(checked, seq, "the exports' last hash is not the sealed hash the live "
                    "log continues from")
    live = log.verify()
    return VerifyResult(live.ok, checked + live.checked, live.first_bad_seq, live.reason)


def _verify_file(path: Path, seq: int, prev: str) -> tuple[int, str] | VerifyResult:
    try:
        return _verify_lines(path, seq, prev)
    except (ValueError, KeyError, TypeError, StopIteration, ArithmeticError) as exc:
        return failed(0, None, f"not a readable export: {exc!r}")


def _verify_lines(path: Path, seq: int, prev: str) -> tuple[int, str] | VerifyResult:
    with open(path, encoding="utf-8") as lines:
        header = json.loads(next(lines))
        if header.get("format") != FORMAT:
            return failed(0, None, f"not a {FORMAT} file")
        if header["first_seq"] > seq + 1:
            return failed(0, seq + 1,
                          f"no export holds records {seq + 1}..{header['first_seq'] - 1}")
        if header["first_seq"] != seq + 1 or header["prev_hash"] != prev:
            return failed(0, seq + 1, f"does not continue the chain at seq {seq + 1}")
        for line in lines:
            text = line.rstrip("\n")
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("hash"), str):
                return failed(0, seq + 1, "not a record")
            if data.get("seq") != seq + 1:
                return failed(0, seq + 1, f"missing record: seq {seq + 1} is absent")
            if data.get("prev_hash") != prev:
                return failed(0, seq + 1, "broken link")
            # The line is the record's hashed text with its hash put in: what an older
            # Butler hashed in its own encoding (docs/audit.md) checks as it was written.
            before, mark, after = text.rpartition(f',"hash":"{data["hash"]}"')
            if not mark or hashlib.sha256((before + after).encode()).hexdigest() != data["hash"]:
                return failed(0, seq + 1, "edited record: hash does not match contents")
            seq, prev = seq + 1, data["hash"]
    if seq != header["last_seq"] or prev != header["last_hash"]:
        return failed(0, seq, "truncated: the header's last record is not the last line")
    return seq, prev


def _fetch(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
    return conn.execute(sql, args).fetchall()


def _seal_expired(conn: sqlite3.Connection, cutoff: str) -> None:
    """Seal the open segment if its newest record is past ``cutoff``."""
    sealed = conn.execute("SELECT coalesce(max(last_seq), 0) FROM audit_segments").fetchone()[0]
    last = conn.execute("SELECT seq, at FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    if last is None or last[0] <= sealed or str(last[1]) >= cutoff:
        return
    seal(conn, sealed + 1, last[0], hash_before(conn, last[0] + 1), str(last[1]))


def _drop_chunk(conn: sqlite3.Connection) -> bool:
    """Delete a few records of the dropped segments, oldest first; whether any were left."""
    base, _ = live_base(conn)
    deleted = conn.execute(
        "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE seq <= ? ORDER BY seq "
        "LIMIT ?)", (base, _DROP_CHUNK)).rowcount
    conn.execute(f"PRAGMA incremental_vacuum({_VACUUM_PAGES})").fetchall()
    return deleted > 0


def _mark_dropped(conn: sqlite3.Connection, last_seq: int) -> None:
    conn.execute("UPDATE audit_segments SET dropped = 1 WHERE last_seq = ?", (last_seq,))


def _main(argv: list[str]) -> int:
    """The child of ``export_in_child``: AUDIT_DB FOLDER FIRST LAST LAST_HASH LAST_AT."""
    path, folder, first, last, last_hash, last_at = argv
    with AuditLog(Path(path)) as log:
        print(export(log, Segment(int(first), int(last), last_hash, last_at, False),
                     Path(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
