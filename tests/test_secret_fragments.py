"""A remote that quotes back part of the token it was sent gets that part redacted before
it reaches the task's error, the audit trail or the log (issue 36: redaction only caught
the whole token)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from internal.redaction import MARK, Redactor
from tests.llm_server import Reply, chat_server
from tests.support import Swarm, post_task
from tests.test_planner import PLAN, TOKEN, _audit, _planner


def test_every_fragment_of_eight_or_more_goes() -> None:
    redact = Redactor([TOKEN, "short"])
    assert redact(f"key {TOKEN[3:11]}, or {TOKEN[9:30]}.") == f"key {MARK}, or {MARK}."
    assert redact(f"{TOKEN[:7]} is not enough") == f"{TOKEN[:7]} is not enough"
    assert redact("nothing of it") == "nothing of it"
    assert redact(TOKEN + TOKEN) == MARK
    assert not Redactor([]) and Redactor([]).__call__("anything") == "anything"


async def test_a_planner_quoting_part_of_its_key(swarm: Swarm, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fragment = TOKEN[4:17]
    quoted = json.dumps({"error": {"message": f"invalid api key '{fragment}...'"}}).encode()
    async with chat_server(Reply(raw=quoted, status=401)) as server:
        home = await swarm.start("home", skills=[PLAN],
                                 extra={"planner": _planner(tmp_path, server.url)})
        status, body = await post_task(home, {"task": "anything", "skill": "plan"})
    assert status == 200 and body["state"] == "failed"
    assert fragment not in json.dumps(body) and MARK in body["error"]["message"]
    await swarm.stop(home)
    assert fragment not in json.dumps(await _audit(home))
    assert not [r for r in caplog.records if fragment in r.getMessage()]
