"""The receipt log (docs/receipts.md): the tasks a commit ends share one signed tree head,
each receipt proves its leaf under it, the log's public head and consistency proofs let
anyone check it only grows, ``butler log verify`` checks it against the stored tasks and
the audit trail, and receipts of the per-task form (older Butlers) still verify."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from butler.config import load_config
from butler.daemon import Daemon
from butler.engine.store import SqliteTaskStore
from butler.engine.task_schema import VERSION
from butler.identity import receipt_log
from butler.identity.key_file import load_identity
from butler.identity.receipt_check import verify_receipts
from butler.identity.receipt_log import LOG_TABLES, ReceiptLog
from butler.identity.receipts import (
    HEAD_TYPE,
    Sealing,
    parse_logged,
    receipt_claims,
    sealing,
    signed_receipt,
    verify_receipt,
)
from internal.protocol.a2a.model import Task, TaskRequest, TaskState
from internal.signing import IdentityKey, jws_claims, merkle, unb64url, verify_jws
from tests.delegation_support import Mesh, skill
from tests.support import ECHO, Swarm, post_task, run_cli
from tests.test_receipts import card_reader, three_hops

AT = "2026-11-28T00:00:00.000000Z"


def _ended(n: int) -> list[Task]:
    return [Task(id=f"task-{i}", context_id="c", owner="o", state=TaskState.COMPLETED,
                 request=TaskRequest(), created_at=AT, updated_at=AT) for i in range(n)]


async def test_a_commit_signs_one_head_for_all_the_tasks_it_ends(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    store = await SqliteTaskStore.open(tmp_path / "tasks.db", log=ReceiptLog("a", lambda: key))
    try:
        first = await asyncio.gather(*(store.seal(sealing(t, "a", "http://a")) for t in
                                       _ended(10)))
        (second,) = await asyncio.gather(store.seal(sealing(_ended(11)[10], "a", "http://a")))
        assert await store.log_head() is not None
    finally:
        await store.close()
    logged = [parse_logged(s.task.receipts[0]) for s in first]
    assert {r.head for r in logged} == {logged[0].head}  # one signature for the commit
    assert sorted(s.leaf for s in first) == list(range(10)) == sorted(r.leaf for r in logged)
    assert jws_claims(logged[0].head, HEAD_TYPE)["size"] == 10
    for s in first:
        claims = verify_receipt(s.task.receipts[0], key.public)
        assert claims["receipt_id"] == s.receipt_id and claims["task_id"] == s.task.id
    # A group of one gets a head of its own; the later head extends the earlier one.
    late = parse_logged(second.task.receipts[0])
    assert second.leaf == 10 and jws_claims(late.head, HEAD_TYPE)["size"] == 11
    store = await SqliteTaskStore.open(tmp_path / "tasks.db", log=ReceiptLog("a", lambda: key))
    try:
        proof = await store.log_consistency(10, 11)
    finally:
        await store.close()
    roots = [unb64url(jws_claims(h, HEAD_TYPE)["root"]) for h in (logged[0].head, late.head)]
    merkle.verify_consistency(10, 11, roots[0], roots[1], proof)


async def test_the_head_and_consistency_proofs_are_public(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO])
    first = ""
    for text in ("one", "two", "three"):  # one at a time: a commit, and a head, each
        status, task = await post_task(home, {"task": text, "skill": "echo"})
        assert status == 200 and task["state"] == "completed", task
        first = first or parse_logged(task["receipts"][0]).head
    async with home.session.get(home.url + "/v2/log/head") as resp:  # no token
        assert resp.status == 200, await resp.text()
        latest = await resp.json()
    key = load_identity(home.daemon.config.data_dir).key.public
    size = jws_claims(latest["head"], HEAD_TYPE)["size"]
    assert latest["size"] == size == 3
    first_head = await _head_of_size(home.url, home.session, 1)
    assert first_head == first
    async with home.session.get(home.url + "/v2/log/consistency",
                                params={"from": "1", "to": str(size)}) as resp:
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        assert "immutable" in resp.headers["Cache-Control"]
    verify_jws(answer["head"], key)
    merkle.verify_consistency(1, size, unb64url(jws_claims(first_head, HEAD_TYPE)["root"]),
                              unb64url(jws_claims(answer["head"], HEAD_TYPE)["root"]),
                              [unb64url(p) for p in answer["proof"]])
    for params in ({"from": "0", "to": "1"}, {"from": "x", "to": "1"}, {"from": "2", "to": "1"},
                   {"from": "1", "to": "99999"}, {"from": "1"}, {"from": "\uff11", "to": "1"}):
        async with home.session.get(home.url + "/v2/log/consistency", params=params) as resp:
            assert resp.status == 400, params
            assert (await resp.json())["error"]["code"] == "invalid_params"


async def _head_of_size(url: str, session: Any, size: int) -> str:
    async with session.get(url + "/v2/log/consistency",
                           params={"from": str(size), "to": str(size)}) as resp:
        assert resp.status == 200, await resp.text()
        head: str = (await resp.json())["head"]
        return head


async def test_log_verify_checks_the_log_against_tasks_and_audit(mesh: Mesh) -> None:
    _, agents = await three_hops(mesh)
    b = agents["b"]
    config, data_dir = str(b.config_path), b.daemon.config.data_dir
    await mesh.close()
    code, out, err = await run_cli("log", "verify", "-c", config, "--json")
    assert code == 0, out + err
    result = json.loads(out)
    assert result["ok"] and result["size"] == result["tasks"] == result["audit_records"] == 1
    code, out, _ = await run_cli("log", "verify", "-c", config)
    assert code == 0 and out.startswith("receipt log intact: 1 leaves"), out
    # The audit trail names the leaf of each task it saw end.
    code, out, err = await run_cli("audit", "tail", "-c", config, "--json")
    finals = [json.loads(ln) for ln in out.splitlines() if '"task_finished"' in ln]
    assert [f["detail"]["leaf"] for f in finals] == ["0"], finals
    code, out, _ = await run_cli("audit", "verify", "-c", config)
    assert code == 0 and "receipt log: 1 final record(s) name a leaf" in out, out
    # A rewritten leaf: the stored task's receipt no longer matches the log, nor the head.
    db = sqlite3.connect(data_dir / "tasks.db")
    with db:
        db.execute("UPDATE receipt_log SET hash = zeroblob(32) WHERE level = 0 AND idx = 0")
    db.close()
    code, out, _ = await run_cli("log", "verify", "-c", config)
    assert code == 1, out
    assert "head of size 1: its root is not the stored log's" in out
    assert "the log's leaf 0 is another receipt" in out
    code, out, _ = await run_cli("audit", "verify", "-c", config)  # the chain holds; the log not
    assert code == 1 and "audit trail intact" in out and "does NOT match" in out, out


async def test_receipts_of_the_per_task_form_still_verify(mesh: Mesh) -> None:
    """A tree whose leaf hop is an older Butler, signing a JWS per task, verifies."""
    raw, agents = await three_hops(mesh)
    key = load_identity(agents["c"].daemon.config.data_dir).key
    claims = receipt_claims(raw["receipts"][2])
    old_form = dict(raw, receipts=[*raw["receipts"][:2], signed_receipt(claims, key)])
    tree = await verify_receipts(old_form, card_reader(mesh.session))
    assert [ln.split()[0] for ln in tree.lines()] == ["a", "b", "c"]
    # One from before receipts recorded the delegation path: nothing to hold it to.
    pathless = {k: v for k, v in claims.items() if k != "chain"}
    older = dict(raw, receipts=[*raw["receipts"][:2], signed_receipt(pathless, key)])
    await verify_receipts(older, card_reader(mesh.session))
    other = IdentityKey.generate()  # the same claims signed by a key c's card does not name
    forged = dict(raw, receipts=[*raw["receipts"][:2], signed_receipt(claims, other)])
    try:
        await verify_receipts(forged, card_reader(mesh.session))
    except Exception as exc:
        assert "does not lead from" in str(exc)
    else:
        raise AssertionError("a receipt signed by another key verified")


async def test_a_schema_6_file_gains_the_log_and_keeps_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = await SqliteTaskStore.open(path)
    await store.put(_ended(1)[0])
    await store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE receipt_log")
    db.execute("DROP TABLE receipt_heads")
    db.execute("PRAGMA user_version=6")
    db.close()
    key = IdentityKey.generate()
    store = await SqliteTaskStore.open(path, log=ReceiptLog("a", lambda: key))
    try:
        assert (await store.get("task-0")) is not None
        sealed = await store.seal(sealing(_ended(2)[1], "a", "http://a"))
        assert sealed.leaf == 0
    finally:
        await store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == VERSION == 7
    db.close()


async def test_a_peer_whose_log_forked_is_refused(mesh: Mesh) -> None:
    """a keeps the head of b's log it saw; b's log is then rewritten (its first leaf
    replaced, every head signed anew by b's real key): b's next answer is proven on a
    head that does not extend the one kept, and a refuses b from then on."""
    mesh.agent("a", skills=[])
    mesh.agent("b", skills=[skill("x.work", "0")])
    mesh.link("a", "b", ["x.work"])
    agents = await mesh.start()
    a, b = agents["a"], agents["b"]
    request = TaskRequest(text="work", capabilities_needed=("x.work",))
    first = await a.client().submit(request)
    assert first.state is TaskState.COMPLETED, first.error
    pins = json.loads((a.daemon.config.data_dir / "peer_keys.json").read_text())
    assert pins["b"]["log_head"]["size"] == 1
    # b rewrites its history: the log's tables emptied, then a task of its own is leaf 0.
    await b.daemon.stop()
    db = sqlite3.connect(b.daemon.config.data_dir / "tasks.db")
    with db:
        db.execute("DELETE FROM receipt_log")
        db.execute("DELETE FROM receipt_heads")
    db.close()
    b.daemon = Daemon(load_config(b.config_path))
    await b.daemon.start()
    status, own = await post_task(b, {"task": "x", "skill": "x.work"})
    assert status == 200 and own["state"] == "completed", own
    second = await a.client().submit(request)
    assert second.state is TaskState.FAILED, second
    assert second.error is not None and second.error.code == "peer_log_forked", second.error
    pins = json.loads((a.daemon.config.data_dir / "peer_keys.json").read_text())
    assert pins["b"]["log_forked"] in second.error.message
    third = await a.client().submit(request)  # refused before anything is sent
    assert third.error is not None and third.error.code == "peer_log_forked"


def test_a_commit_that_rolls_back_leaves_no_leaf_behind(tmp_path: Path) -> None:
    """The log appends inside the task store's transaction: when it rolls back, the next
    commit takes the same leaves again, and every proof still folds."""
    key = IdentityKey.generate()
    log = ReceiptLog("a", lambda: key)
    conn = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    for statement in LOG_TABLES:
        conn.execute(statement)
    tasks = _ended(6)

    def commit(group: list[Sealing], keep: bool) -> None:
        conn.execute("BEGIN")
        log.append_group(conn, group)
        conn.execute("COMMIT" if keep else "ROLLBACK")

    kept = [sealing(t, "a", "http://a") for t in tasks[:3]]
    commit(kept, True)
    lost = [sealing(t, "a", "http://a") for t in tasks[3:5]]
    commit(lost, False)
    again = [sealing(t, "a", "http://a") for t in tasks[3:]]
    commit(again, True)
    assert [s.leaf for s in again] == [3, 4, 5]
    for s in (*kept, *again):
        verify_receipt(s.receipt, key.public)
    assert receipt_log.size(conn) == 6
    old, new = (unb64url(jws_claims(parse_logged(s.receipt).head, HEAD_TYPE)["root"])
                for s in (kept[0], again[0]))
    merkle.verify_consistency(3, 6, old, new, receipt_log.consistency(conn, 3, 6))
    conn.close()
