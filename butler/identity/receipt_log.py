"""This agent's receipt log: every receipt it makes is a leaf of one append-only Merkle
tree (RFC 9162 hashing, ``internal.signing.merkle``), stored in the tasks database.

The tasks that end together are committed together (``BatchWriter``), and their
receipts are made inside that commit (``append_group``): their claims become the next
leaves, the group's tree head (size, root, time, agent, key id) is signed once, and each
task gets its leaf index and inclusion proof against that head. One signature per commit
instead of one per task; and since every head commits to all the leaves before it, a
later head that does not extend an earlier one (a consistency proof, ``consistency``)
shows the log was rewritten.

Tables (created by the tasks schema, ``LOG_TABLES``): ``receipt_log`` holds the hash of
every perfect subtree, so any proof reads O(log n) rows; ``receipt_heads`` every signed
head by size. Neither is ever purged with the tasks: old receipts stay provable.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

from butler.identity.receipts import HEAD_TYPE, LoggedReceipt, Sealing
from butler.runtime.clock import now_iso
from internal.signing import (
    IdentityKey,
    b64url,
    canonical,
    merkle,
    protected_header,
    sign_protected,
)

LOG_TABLES = ("""
CREATE TABLE IF NOT EXISTS receipt_log (
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID""", """
CREATE TABLE IF NOT EXISTS receipt_heads (
    size INTEGER PRIMARY KEY,
    head TEXT NOT NULL
)""")


class ReceiptLog:
    """Appends groups of receipts and signs their heads with the agent's key (read at
    each commit: a rotated key signs the next head)."""

    def __init__(self, agent_id: str, key: Callable[[], IdentityKey]) -> None:
        self.agent_id = agent_id
        self._key = key
        # The frontier the last append left, and the size it is of: the next append
        # starts from it when the log is still of that size (a commit that rolled back
        # left it smaller, and the frontier is read again).
        self._frontier: tuple[int, dict[tuple[int, int], bytes]] = (-1, {})

    def append_group(self, conn: sqlite3.Connection, group: Iterable[Sealing]) -> None:
        """Inside the commit that stores ``group``'s tasks: each gets its leaf and its
        receipt against the one head signed for the group."""
        group = list(group)
        if not group:
            return
        old = size(conn)
        known, frontier = self._frontier
        nodes = dict(frontier) if known == old else \
            {at: node(conn, *at) for at in _frontier_at(old)}

        def read(level: int, index: int) -> bytes:
            found = nodes.get((level, index))
            return found if found is not None else node(conn, level, index)

        written: list[tuple[int, int, bytes]] = []
        leaves = [canonical(s.claims) for s in group]
        for leaf_index, leaf in enumerate(leaves, start=old):
            for level, index, digest in merkle.appended_nodes(leaf_index, leaf, read):
                nodes[(level, index)] = digest
                written.append((level, index, digest))
        new = old + len(group)
        self._frontier = (new, {at: read(*at) for at in _frontier_at(new)})
        head = self._sign_head(new, merkle.root(new, read))
        conn.executemany("INSERT INTO receipt_log(level, idx, hash) VALUES (?,?,?)", written)
        conn.execute("INSERT INTO receipt_heads(size, head) VALUES (?,?)", (new, head))
        for leaf_index, sealing in enumerate(group, start=old):
            proof = merkle.inclusion_proof(leaf_index, new, read)
            sealing.leaf = leaf_index
            sealing.receipt = LoggedReceipt(sealing.claims, leaf_index, proof, head).encode()

    def _sign_head(self, tree_size: int, root: bytes) -> str:
        key = self._key()
        claims = {"agent": self.agent_id, "size": tree_size, "root": b64url(root),
                  "at": now_iso(), "kid": key.kid}
        return sign_protected(key, canonical(claims), _head_header(key))


def _head_header(key: IdentityKey) -> str:
    return protected_header(key, {"typ": HEAD_TYPE, "jwk": key.public.jwk})


def size(conn: sqlite3.Connection) -> int:
    """How many receipts the log holds (the size of its latest head)."""
    row = conn.execute("SELECT max(size) FROM receipt_heads").fetchone()
    return int(row[0] or 0)


def head(conn: sqlite3.Connection, tree_size: int | None = None) -> str | None:
    """The signed head of ``tree_size`` (the latest when None), if there is one."""
    row = conn.execute("SELECT head FROM receipt_heads ORDER BY size DESC LIMIT 1"
                       if tree_size is None else
                       "SELECT head FROM receipt_heads WHERE size=?",
                       () if tree_size is None else (tree_size,)).fetchone()
    return str(row[0]) if row else None


def consistency(conn: sqlite3.Connection, old: int, new: int) -> list[bytes]:
    """The proof that the log at ``new`` extends the log at ``old`` (``merkle.BadProof``
    for sizes it does not hold)."""
    if new > size(conn):
        raise merkle.BadProof(f"the log holds fewer than {new} receipts")
    return merkle.consistency_proof(old, new, lambda level, i: node(conn, level, i))


def inclusion(conn: sqlite3.Connection, leaf: int, tree_size: int) -> list[bytes]:
    if tree_size > size(conn):
        raise merkle.BadProof(f"the log holds fewer than {tree_size} receipts")
    return merkle.inclusion_proof(leaf, tree_size, lambda level, i: node(conn, level, i))


def _frontier_at(tree_size: int) -> list[tuple[int, int]]:
    """The perfect subtrees a tree of ``tree_size`` is made of (level, index): all an
    append reads."""
    found = []
    start = 0
    for level in range(tree_size.bit_length() - 1, -1, -1):
        if tree_size >> level & 1:
            found.append((level, start >> level))
            start += 1 << level
    return found


def node(conn: sqlite3.Connection, level: int, index: int) -> bytes:
    row = conn.execute("SELECT hash FROM receipt_log WHERE level=? AND idx=?",
                       (level, index)).fetchone()
    if row is None:
        raise merkle.BadProof(f"the receipt log has no node {level}/{index}")
    return bytes(row[0])
