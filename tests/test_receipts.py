"""Signed receipts on real daemons: every terminal task carries one, a three-hop
delegation's receipts verify as one tree against the signers' cards (``butler receipt
verify``), and an edit anywhere fails."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from butler.identity.receipt_check import verify_receipts
from butler.identity.receipts import receipt_claims
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.codec.swarm_envelope import SWARM_EXTENSION_URI
from internal.protocol.a2a.model import TaskRequest, TaskState
from internal.signing import BadSignature, b64url
from tests.a2a_support import JSONRPC, WAIT, rpc
from tests.delegation_support import Mesh, skill
from tests.support import Swarm, post_task, run_cli


async def three_hops(mesh: Mesh) -> tuple[dict[str, Any], Any]:
    """a -> b -> c, where c does the work for 0.10; the answer as a's /v2 sends it."""
    for name, skills in (("a", []), ("b", []), ("c", [skill("x.work", "0.10")])):
        mesh.agent(name, skills=skills)
    mesh.link("a", "b", ["x.work"])
    mesh.link("b", "c", ["x.work"])
    agents = await mesh.start()
    task = await agents["a"].client().submit(
        TaskRequest(text="deep", capabilities_needed=("x.work",)))
    assert task.state is TaskState.COMPLETED, task.error
    async with mesh.session.get(f"{agents['a'].url}/v2/tasks/{task.id}",
                                headers=agents["a"].headers()) as resp:
        raw: dict[str, Any] = await resp.json()
    return raw, agents


def card_reader(session: aiohttp.ClientSession) -> Any:
    async def card_of(url: str) -> Mapping[str, Any]:
        return await A2AClient(url, "", session=session).card(time.monotonic() + 10)
    return card_of


async def test_a_three_hop_delegation_verifies_as_a_tree(mesh: Mesh) -> None:
    raw, agents = await three_hops(mesh)
    claims = [receipt_claims(r) for r in raw["receipts"]]
    assert [c["agent"] for c in claims] == ["a", "b", "c"]
    a, b, c = claims
    assert a["children"] == [b["receipt_id"]] and b["children"] == [c["receipt_id"]]
    assert c["cost_usd"] == "0.10" and a["total_usd"] == "0.10"
    assert {x["trace_id"] for x in claims} == {raw["swarm"]["trace_id"]}
    assert a["task_id"] == raw["id"] and a["state"] == "completed"
    tree = await verify_receipts(raw, card_reader(mesh.session))
    assert [ln.split()[0] for ln in tree.lines()] == ["a", "b", "c"]
    code, out, err = await run_cli("receipt", "verify", agents["a"].url, raw["id"],
                                   token=agents["a"].tokens["operator"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"receipts of task {raw['id']}: 3 verified"
    assert lines[1].startswith("a  completed") and lines[3].startswith("    c  completed")
    assert "cost 0.10 USD" in lines[3]
    # The audit trail names the receipt stored with the task (read once it has stopped:
    # the writer has flushed).
    config = str(agents["a"].config_path)
    await mesh.close()
    code, out, err = await run_cli("audit", "tail", "-c", config, "--json")
    assert code == 0, err
    final = [json.loads(line) for line in out.splitlines()]
    assert any(r["kind"] == "task_finished" and r.get("detail", {}).get("receipt") ==
               a["receipt_id"] for r in final), final


def _flip(text: str, at: int) -> str:
    swap = "A" if text[at] != "A" else "B"
    return text[:at] + swap + text[at + 1:]


def _edited(receipt: str, **changes: Any) -> str:
    """The logged receipt with ``changes`` to its own fields (``claims``: to its claims),
    its proof and signed head kept."""
    found = json.loads(receipt)
    found["claims"] = {**found["claims"], **changes.pop("claims", {})}
    return json.dumps({**found, **changes})


async def test_an_edit_anywhere_fails(mesh: Mesh) -> None:
    raw, _ = await three_hops(mesh)
    card_of = card_reader(mesh.session)
    edits = []
    heads = [json.loads(r)["head"] for r in raw["receipts"]]
    for i, receipt in enumerate(raw["receipts"]):
        # Claims, proof, head, signature (not its last character, whose low bits are
        # base64 padding: flipping them may not change the signature's bytes).
        for at in range(0, len(receipt) - 3, len(receipt) // 7):
            edits.append(("receipts", i, _flip(receipt, at)))
        edits.append(("receipts", i, _edited(receipt, claims={"cost_usd": "0.01"})))
        edits.append(("receipts", i, _edited(receipt, leaf=1)))
        edits.append(("receipts", i, _edited(receipt, proof=[b64url(bytes(32))])))
        edits.append(("receipts", i, _edited(receipt, head=heads[(i + 1) % len(heads)])))
    edited_result = copy.deepcopy(raw)
    edited_result["result"]["parts"][0]["text"] += "!"
    cases = [edited_result]
    for _, i, value in edits:
        case = copy.deepcopy(raw)
        case["receipts"][i] = value
        cases.append(case)
    dropped = copy.deepcopy(raw)
    del dropped["receipts"][2]
    cases.append(dropped)
    for case in cases:
        with pytest.raises(BadSignature):
            await verify_receipts(case, card_of)


async def test_butler_receipt_verify_fails_on_a_stored_edit(mesh: Mesh) -> None:
    """An operator (or anyone with the disk) edits the stored result after the fact: the
    receipt that travels with it no longer matches, and the CLI says so, exit 1."""
    import json
    import sqlite3

    from butler.config import load_config
    from butler.daemon import Daemon

    raw, agents = await three_hops(mesh)
    a = agents["a"]
    await a.daemon.stop()
    db = sqlite3.connect(a.daemon.config.data_dir / "tasks.db")
    with db:  # the row names its fields: the result is edited as a person would edit it
        (document,) = db.execute("SELECT document FROM tasks WHERE id = ?",
                                 (raw["id"],)).fetchone()
        stored = json.loads(document)
        assert {"text": "deep"} in stored["parts"]
        stored["parts"] = [{"text": "deeq"} if p == {"text": "deep"} else p
                           for p in stored["parts"]]
        db.execute("UPDATE tasks SET document = ? WHERE id = ?",
                   (json.dumps(stored), raw["id"]))
    db.close()
    a.daemon = Daemon(load_config(a.config_path))
    await a.daemon.start()
    code, out, err = await run_cli("receipt", "verify", a.url, raw["id"],
                                   token=a.tokens["operator"])
    assert code == 1, out
    assert err.startswith("butler: receipt_invalid: ") and "not the one signed" in err, err


async def test_a_task_that_ends_before_it_runs_is_signed_too(swarm: Swarm) -> None:
    home = await swarm.start("home")
    _, task = await post_task(home, {"task": "x", "skill": "no-such-skill"})
    assert task["state"] == "failed", task
    (claims,) = [receipt_claims(r) for r in task["receipts"]]
    assert claims["state"] == "failed" and claims["task_id"] == task["id"]
    code, out, err = await run_cli("receipt", "verify", home.url, task["id"],
                                   token=home.tokens["operator"])
    assert code == 0, err
    assert out.splitlines()[1].startswith("home  failed")


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_streams_last_status_update_carries_the_receipt(swarm: Swarm,
                                                                 version: str) -> None:
    """A streamed task that ends after it began (here: canceled while it waits) ends its
    stream with a status update, not the task: the receipt rides in that update."""
    home = await swarm.start("home", skills=[WAIT])
    message: dict[str, Any] = {"messageId": "m1", "parts": [{"text": "wait"}]}
    if version == "1.0":
        method, message["role"], cancel = "SendStreamingMessage", "ROLE_USER", "CancelTask"
    else:
        method, message["role"], cancel = "message/stream", "user", "tasks/cancel"
        message["kind"] = "message"
        message["parts"] = [{"kind": "text", "text": "wait"}]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {
        "message": message, "metadata": {"skill": "wait"}}}
    headers = {**home.headers(), "A2A-Version": version}
    events: list[dict[str, Any]] = []
    async with home.session.post(home.url + JSONRPC, json=body, headers=headers) as resp:
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])["result"]
            events.append(event)
            if len(events) == 1:
                task = event.get("task", event)
                status, answer = await rpc(home, cancel, {"id": task["id"]},
                                           version=version)
                assert status == 200 and "result" in answer, answer
    last = events[-1].get("statusUpdate", events[-1])
    receipts = last["metadata"][SWARM_EXTENSION_URI]["receipts"]
    assert receipt_claims(receipts[0])["state"] == "canceled"


async def test_hostile_claims_signed_by_a_real_key_are_refused_not_crashes(mesh: Mesh) -> None:
    """A signer can sign anything: a NaN cost, children that are not receipt ids, a result
    that is not parts, an amount past any decimal context. Each is a BadSignature naming
    it, never a traceback."""
    from butler.identity.key_file import load_identity
    from butler.identity.receipts import RECEIPT_TYPE
    from internal.signing import canonical, sign_jws

    raw, agents = await three_hops(mesh)
    card_of = card_reader(mesh.session)
    key = load_identity(agents["c"].daemon.config.data_dir).key
    leaf = len(raw["receipts"]) - 1
    assert receipt_claims(raw["receipts"][leaf])["agent"] == "c"

    def signed(**changes: Any) -> str:
        claims = {**receipt_claims(raw["receipts"][leaf]), **changes}
        return sign_jws(key, canonical(claims), {"typ": RECEIPT_TYPE, "jwk": key.public.jwk})

    cases = []
    # 1e1000000 is past the decimal context's exponent: a sum with it raised decimal.Overflow.
    for changes in ({"total_usd": "NaN"}, {"cost_usd": "sNaN"}, {"children": 5},
                    {"children": [{"id": 1}]}, {"total_usd": "1e1000000"},
                    {"cost_usd": "1e1000000", "total_usd": "1e1000000"}):
        case = copy.deepcopy(raw)
        case["receipts"][leaf] = signed(**changes)
        cases.append(case)
    bent_result = copy.deepcopy(raw)
    bent_result["result"] = {"parts": 5}
    cases.append(bent_result)
    for case in cases:
        with pytest.raises(BadSignature):
            await verify_receipts(case, card_of)


async def test_a_peers_fractional_data_verifies_and_stays_a_number(mesh: Mesh) -> None:
    """A peer's data part with a fraction (memory.search's score, docs/lan.md's action
    items): it comes back as the number it was, and the tree verifies (a fraction read as a
    Decimal was served as a string, which the receipts had not signed)."""
    mesh.agent("a")
    mesh.agent("b", skills=[skill("memory.write", builtin="memory.write"),
                            skill("memory.search", builtin="memory.search")])
    mesh.link("a", "b", ["memory.write", "memory.search"])
    agents = await mesh.start()
    for text, needs in (("the printer PIN is 4711", "memory.write"),
                        ("printer", "memory.search")):
        task = await agents["a"].client().submit(
            TaskRequest(text=text, capabilities_needed=(needs,)))
        assert task.state is TaskState.COMPLETED, task.error
    async with mesh.session.get(f"{agents['a'].url}/v2/tasks/{task.id}",
                                headers=agents["a"].headers()) as resp:
        raw: dict[str, Any] = await resp.json()
    (hit,) = next(p["data"]["hits"] for p in raw["result"]["parts"] if "data" in p)
    assert isinstance(hit["score"], float), hit
    tree = await verify_receipts(raw, card_reader(mesh.session))
    assert [ln.split()[0] for ln in tree.lines()] == ["a", "b"]
