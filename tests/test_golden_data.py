"""Data folders written by an earlier release (tests/fixtures/golden, made by its
``make_golden.py``) open in this one: every task reads back as that release read it, its
receipts still verify by the key of the agent that signed them, and the audit chain
still verifies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from butler.audit.log import AuditLog
from butler.engine.store import SqliteTaskStore
from butler.identity.receipts import result_digest
from internal.protocol.a2a.codec.butler_v2 import encode_artifact, encode_part
from internal.protocol.a2a.model import Task
from internal.signing import jws_payload, public_key_from_jwk, verify_jws

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
FOLDERS = ("home", "office", "office/agents/helper")


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    for name in ("home", "office"):
        shutil.copytree(GOLDEN / name, tmp_path / name)
    return tmp_path


def _public_jwks(root: Path) -> dict[str, dict[str, str]]:
    """Each golden agent's public key (its identity file's, less the private part)."""
    keys = {}
    for folder in FOLDERS:
        jwk = json.loads((root / folder / "identity_key.json").read_text())["key"]
        keys[folder.rsplit("/", 1)[-1]] = {k: v for k, v in jwk.items() if k in ("crv", "kty", "x")}
    return keys


def _check_receipts(task: Task, keys: dict[str, dict[str, str]]) -> None:
    for n, jws in enumerate(task.receipts):
        header, _ = jws_payload(jws)
        claims = json.loads(verify_jws(jws, public_key_from_jwk(header["jwk"])))
        signer = {k: v for k, v in header["jwk"].items() if k in ("crv", "kty", "x")}
        assert keys[claims["agent"]] == signer, claims
        if n == 0:  # the task's own receipt: its id, state and very result
            assert claims["task_id"] == task.wire_id and claims["state"] == task.state.value
            assert claims["digest"] == result_digest({
                "parts": [encode_part(p) for p in task.parts],
                "artifacts": [encode_artifact(a) for a in task.artifacts]})


@pytest.mark.parametrize("folder", FOLDERS)
async def test_every_task_reads_back_as_written_with_its_receipts_verifying(
        folders: Path, folder: str) -> None:
    expected = json.loads((GOLDEN / "tasks.json").read_text())[folder]
    keys = _public_jwks(folders)
    store = await SqliteTaskStore.open(folders / folder / "tasks.db")
    try:
        page = await store.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                      limit=1000)
        assert {t.id: repr(t) for t in page.tasks} == expected
        for task in page.tasks:
            assert repr(await store.get(task.id)) == expected[task.id]
            _check_receipts(task, keys)
    finally:
        await store.close()
    assert sum(bool(t.receipts) for t in page.tasks) >= 1


def test_the_delegated_tree_holds_both_agents_receipts() -> None:
    home = json.loads((GOLDEN / "tasks.json").read_text())["home"]
    assert any("capabilities_needed=('action.items',)" in t and "'office'" in t
               for t in home.values())


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_audit_chain_still_verifies(folders: Path, folder: str) -> None:
    with AuditLog(folders / folder / "audit.db") as log:
        result = log.verify()
        records = list(log.iter_all())
    assert result.ok, result
    assert result.checked == len(records) >= 2
    assert {r.kind for r in records} >= ({"inbound", "task_finished"} if folder != "home"
                                         else {"inbound", "delegation_sent", "task_finished"})
