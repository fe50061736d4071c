"""Receipts in the task store: kept compact (a signer number, the receipt id, the
signature, the claims the task does not give), given back byte for byte, still
verifying; anything that cannot be rebuilt exactly is kept as its text."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from butler.engine.receipt_rows import SIGNERS_TABLE, Signers
from butler.engine.store import SqliteTaskStore
from butler.engine.task_row import decode_row, row_columns
from butler.identity.key_file import AgentIdentity
from butler.identity.receipts import seal
from butler.storage import hex_bytes
from internal.protocol.a2a.model import (
    Budget,
    CostNode,
    Part,
    Task,
    TaskState,
    scoped_task_id,
)
from internal.signing import IdentityKey, b64url, sign_jws, unb64url, verify_jws
from tests.test_task_storage import echo

URL = "http://127.0.0.1:8081"


def _body(path: Path, task_id: str) -> tuple[str, bytes]:
    """A task's stored body: its JSON text, and the binary fields after it."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT body FROM tasks WHERE id=?", (hex_bytes(task_id),))
        body = row.fetchone()[0]
    finally:
        conn.close()
    if isinstance(body, str):
        return body, b""
    text, _, binary = body.removeprefix(b"\x01").partition(b"\x00")
    return text.decode(), binary


async def _put_and_get(path: Path, task: Task) -> Task:
    """``task`` written to a store at ``path`` and read back."""
    store = await SqliteTaskStore.open(path)
    try:
        await store.put(task)
        back = await store.get(task.id)
    finally:
        await store.close()
    assert back is not None
    return back


async def test_a_sealed_task_keeps_its_receipt_compact_and_exact(tmp_path: Path) -> None:
    me = AgentIdentity(IdentityKey.generate())
    task = seal(echo(1), me, "home", URL)
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    try:
        await store.put(task)
        assert await store.get(task.id) == task
    finally:
        await store.close()
    body, binary = _body(tmp_path / "tasks.db", task.id)
    protected, payload, signature = task.receipts[0].split(".")
    assert protected not in body and payload not in body and signature not in body
    # the trace id, then the receipt's id and signature (its digest is the result's)
    assert binary[16:].endswith(unb64url(signature)) and len(binary) == 16 + 80
    assert len(body) + len(binary) < 220  # the receipt alone was about 850 bytes as text

    again = await SqliteTaskStore.open(tmp_path / "tasks.db")  # signers read from the file
    try:
        back = await again.get(task.id)
    finally:
        await again.close()
    assert back is not None and back.receipts == task.receipts
    claims = json.loads(verify_jws(back.receipts[0], me.key.public))
    assert claims["task_id"] == task.wire_id and claims["agent"] == "home"


async def test_a_delegated_tree_and_odd_receipts_come_back_byte_for_byte(
        tmp_path: Path) -> None:
    me, peer = AgentIdentity(IdentityKey.generate()), AgentIdentity(IdentityKey.generate())
    child = seal(replace(echo(2), id="peer-task", state=TaskState.COMPLETED,
                         parts=(Part(text="from the peer"),)), peer, "office", "http://peer")
    key = IdentityKey.generate()
    spaced = sign_jws(key, b'{"receipt_id": "r-x", "agent": "a"}', {"typ": "butler-receipt+jws"})
    odd = (
        "not a jws at all",
        "a.b.c",
        spaced,  # its payload is not in canonical form
        sign_jws(key, json.dumps({"receipt_id": "r-1", "cost_usd": 0.1}).encode(),
                 {"typ": "butler-receipt+jws"}),  # a number, not text
        sign_jws(key, b"[1,2]", {"typ": "butler-receipt+jws"}),  # not an object
        spaced.rsplit(".", 1)[0] + "." + b64url(b"\x00" * 64)[:-1] + "B",  # odd base64
    )
    # Its own receipt after the peer's, on a task whose id its caller chose (scoped).
    mine = seal(replace(echo(3), id=scoped_task_id("chosen", "alice"),
                        receipts=(*child.receipts, *odd)), me, "home", URL)
    back = await _put_and_get(tmp_path / "tasks.db", mine)
    assert back.receipts == mine.receipts
    verify_jws(back.receipts[0], me.key.public)
    verify_jws(back.receipts[1], peer.key.public)
    body, binary = _body(tmp_path / "tasks.db", mine.id)
    for jws in (mine.receipts[0], child.receipts[0]):
        assert jws.split(".")[0] not in body  # both signers' headers are kept once
        assert unb64url(jws.split(".")[2]) in binary
    for jws in odd:
        assert json.dumps(jws) in body  # kept as the text it is


def test_without_known_signers_a_receipt_is_kept_as_text() -> None:
    task = seal(echo(4), AgentIdentity(IdentityKey.generate()), "home", URL)
    columns = row_columns(task)
    assert task.receipts[0].encode() in columns[-1]
    assert decode_row(*columns) == task


async def test_a_version_1_file_gains_the_signers_loses_three_indexes_and_reads_as_it_was(
        tmp_path: Path) -> None:
    me = AgentIdentity(IdentityKey.generate())
    old = seal(echo(5), me, "home", URL)
    path = tmp_path / "tasks.db"
    store = await SqliteTaskStore.open(path)
    await store.close()
    conn = sqlite3.connect(path)  # as version 1 wrote it: receipts as text, no signers
    conn.execute("DROP TABLE receipt_signers")
    conn.execute("CREATE INDEX tasks_owner ON tasks(owner, seq)")
    conn.execute("CREATE INDEX tasks_owner_updated ON tasks(owner, updated, seq)")
    conn.execute("CREATE INDEX tasks_updated ON tasks(updated, seq)")
    from butler.engine.task_schema import INSERT, VERSION
    conn.execute(INSERT, row_columns(old))
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()

    store = await SqliteTaskStore.open(path)
    new = seal(echo(6), me, "home", URL)
    try:
        assert await store.get(old.id) == old
        await store.put(new)
        assert await store.get(new.id) == new
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == VERSION == 5
        assert conn.execute("SELECT count(*) FROM receipt_signers").fetchone()[0] == 1
        assert conn.execute("SELECT name FROM task_owners").fetchall() == [(old.owner,)]
        assert conn.execute("SELECT DISTINCT typeof(owner) FROM tasks").fetchall() == [
            ("blob",)]
        indexes = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE "
                                              "type='index' AND tbl_name='tasks'")}
        assert not indexes & {"tasks_owner", "tasks_owner_updated", "tasks_updated"}
    finally:
        conn.close()
    assert old.receipts[0] in _body(path, old.id)[0]
    assert new.receipts[0] not in _body(path, new.id)[0]


_ME = AgentIdentity(IdentityKey.generate())
_money = st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False)


@given(text=st.text(), agent=st.text(min_size=1), url=st.text(), trace=st.text(),
       state=st.sampled_from(list(TaskState)), start=_money, spent=_money, cost=_money,
       scoped=st.booleans())
def test_any_sealed_task_comes_back_byte_for_byte(
        text: str, agent: str, url: str, trace: str, state: TaskState, start: Decimal,
        spent: Decimal, cost: Decimal, scoped: bool) -> None:
    """Whatever the task holds (any text, any amounts, any state, an id its caller
    chose), the row gives back the very receipt signed, compact or as text."""
    task = replace(echo(8, state=state), parts=(Part(text=text),), trace_id=trace,
                   budget=Budget(start, spent),
                   cost=CostNode(agent, "echo", cost, 1, state.value),
                   id=scoped_task_id("mine", "alice") if scoped else "task-8")
    sealed = seal(task, _ME, agent, url)
    conn = sqlite3.connect(":memory:")
    conn.execute(SIGNERS_TABLE)
    signers = Signers()
    signers.add(Signers.register(conn, sealed.receipts))
    columns = row_columns(sealed, signers)
    assert decode_row(*columns, signers=signers).receipts == sealed.receipts
    verify_jws(decode_row(*columns, signers=signers).receipts[0], _ME.key.public)


async def test_a_signature_in_a_second_spelling_is_kept_as_spelled(tmp_path: Path) -> None:
    """Base64url has two spellings of some bytes (the last character's unused bits): a
    receipt whose signature is not in the one ``b64url`` writes keeps its text."""
    me = AgentIdentity(IdentityKey.generate())
    task = seal(echo(9), me, "home", URL)
    head, _, signature = task.receipts[0].rpartition(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other = signature[:-1] + alphabet[alphabet.index(signature[-1]) ^ 1]
    assert unb64url(other) == unb64url(signature) and other != signature
    odd = replace(task, receipts=(f"{head}.{other}",))
    back = await _put_and_get(tmp_path / "tasks.db", odd)
    assert back.receipts == odd.receipts
    assert other in _body(tmp_path / "tasks.db", odd.id)[0]


def test_a_receipt_just_sealed_is_kept_from_its_seal_and_any_other_is_checked() -> None:
    """The task ``seal`` returned is kept without decoding its receipt again; a copy of
    it, or a signer now known by another url, goes through the full check, and each
    gives back the receipt signed."""
    sealed = seal(echo(10), _ME, "home", URL)
    conn = sqlite3.connect(":memory:")
    conn.execute(SIGNERS_TABLE)
    signers = Signers()
    signers.add(Signers.register(conn, sealed.receipts))
    moved = Signers([replace(s, url="http://10.0.0.9:8081") for s in Signers.load(conn)
                     ._by_ref.values()])
    for task, known in ((sealed, signers), (replace(sealed), signers), (sealed, moved)):
        columns = row_columns(task, known)
        assert decode_row(*columns, signers=known).receipts == sealed.receipts
    assert row_columns(replace(sealed), signers) == row_columns(sealed, signers)
    assert len(row_columns(sealed, moved)[-1]) > len(row_columns(sealed, signers)[-1])
