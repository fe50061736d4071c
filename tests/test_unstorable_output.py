"""A skill's output that the task store cannot keep fails that task alone (issue 33,
N1): it ends ``failed`` with ``output_not_storable``, with its final audit record and a
receipt, while another caller's tasks committed beside it under load are untouched; no
answer is a 500 and every acknowledged task ends without a restart."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from butler.audit.log import AuditLog
from butler.audit.record import AuditRecord
from tests.support import ECHO, Swarm, call, command_skill, plugin_skill, post_task

# A program that cuts text by UTF-16 units and prints JSON: the cut falls in an emoji.
SURROGATE_COMMAND = [sys.executable, "-c", r'print("{\"text\": \"cut at \\ud83d\"}")']
# A program that prints bytes that are not UTF-8: read as text, each replaced.
LATIN1_COMMAND = [sys.executable, "-c", r'import sys; sys.stdout.buffer.write(b"caf\xe9 \xff")']
NOT_STORABLE = {"surrogate", "deep", "object", "progress", "artifact", "result"}
STORABLE = {"nan": [{"kind": "data", "data": {"n": None}}], "plain": [
    {"kind": "text", "text": "plain"}]}


async def test_unstorable_output_fails_its_task_alone_under_two_callers_load(
        swarm: Swarm) -> None:
    home = await swarm.start(
        "home", callers={"alice": {}, "bob": {}},
        skills=[ECHO, plugin_skill("garbage", "tests.plugins.garbage:garbage"),
                command_skill("cutter", SURROGATE_COMMAND),
                command_skill("latin1", LATIN1_COMMAND)])
    kinds = [*sorted(NOT_STORABLE), *sorted(STORABLE), "huge"]

    async def alice(n: int) -> tuple[str, int, dict[str, Any]]:
        kind = kinds[n % len(kinds)]
        body = {"skill": "garbage", "task": kind} if n % 5 else {"skill": "cutter",
                                                                  "task": "x"}
        status, task = await post_task(home, body, who="alice")
        return ("command" if not n % 5 else kind), status, task

    async def bob(n: int) -> tuple[int, dict[str, Any]]:
        return await post_task(home, {"skill": "echo", "task": f"bob {n}"}, who="bob")

    theirs, ours = await asyncio.gather(
        asyncio.gather(*(alice(n) for n in range(60))),
        asyncio.gather(*(bob(n) for n in range(120))))

    # Bob's tasks, committed in the same batches as alice's garbage, are all whole.
    for n, (status, task) in enumerate(ours):
        assert status == 200, task
        assert task["state"] == "completed" and task["output"] == f"bob {n}", task
        assert task["receipts"], task
    for kind, status, task in theirs:
        assert status == 200, (kind, task)
        if kind in STORABLE:
            assert task["state"] == "completed", (kind, task)
            assert task["result"]["parts"] == STORABLE[kind]
        elif kind == "huge":  # strict JSON keeps any integer
            assert task["state"] == "completed", task
        else:
            assert task["state"] == "failed", (kind, task)
            assert task["error"]["code"] == "output_not_storable", (kind, task)
            assert task["result"] == {"parts": [], "artifacts": []} or kind == "artifact"
            assert task["receipts"], task
    # Stored as answered, without a restart: every task is terminal when read back.
    for _, _, task in theirs:
        status, stored = await call(home, "GET", f"/v2/tasks/{task['id']}", who="alice")
        assert status == 200 and stored["state"] == task["state"], stored
    status, latin1 = await post_task(home, {"skill": "latin1", "task": "x"}, who="alice")
    assert status == 200 and latin1["output"] == "caf\ufffd \ufffd", latin1
    for _, task in ours:
        status, stored = await call(home, "GET", f"/v2/tasks/{task['id']}", who="bob")
        assert status == 200 and stored["state"] == "completed", stored
    failed = {t["id"] for kind, _, t in theirs if t["state"] == "failed"}
    assert len(failed) >= 36

    await swarm.stop(home)  # the audit writer flushes what it queued

    def final_records() -> dict[str | None, AuditRecord]:
        with AuditLog(home.daemon.config.data_dir / "audit.db") as log:
            return {r.task_id: r for r in log.iter_all() if r.kind == "task_finished"}

    finals = await asyncio.to_thread(final_records)
    assert failed <= finals.keys()
    assert {finals[i].code for i in failed} == {"output_not_storable"}
    assert all(finals[i].detail.get("receipt") for i in failed)
    assert {t["id"] for _, t in ours} <= finals.keys()
