"""A skill's declared input schema is checked before any task is made, on every binding,
and ``{}`` is an input like any other (issue 38, items 3 and 7). MCP: tests/test_mcp.py."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from butler.config import load_config
from butler.config.node import ConfigError
from internal.protocol.a2a.codec.input_schema import SchemaCheck
from internal.protocol.a2a.model import RequestError
from tests.a2a_support import rpc
from tests.support import ECHO, Instance, Swarm, config_dict, plugin_skill, post_task, write_config

SCHEMA = {"type": "object", "additionalProperties": False, "properties": {
    "n": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string"}},
    "ratio": {"type": "number"},
}}
STRICT = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}


async def start(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=[
        ECHO, plugin_skill("about", "tests.plugins.sample:about", input_schema=SCHEMA),
        plugin_skill("strict", "tests.plugins.sample:about", input_schema=STRICT)])


async def test_v2_takes_an_empty_input_and_refuses_an_invalid_one(swarm: Swarm) -> None:
    home = await start(swarm)
    status, task = await post_task(home, {"skill": "about", "input": {}})
    assert status == 200 and task["state"] == "completed", task
    assert task["result"]["parts"][0]["data"]["input"] == {}
    # A skill without a schema takes {} too: nothing of it is checked.
    status, task = await post_task(home, {"skill": "echo", "input": {}})
    assert status == 200 and task["state"] == "completed", task

    status, task = await post_task(home, {"skill": "about",
                                          "input": {"n": 2, "ratio": 0.5, "tags": ["a"]}})
    assert status == 200 and task["state"] == "completed", task

    before = await home.client().list_tasks()
    for given, path in [({"n": "two"}, "/n"), ({"n": 0}, "/n"), ({"tags": ["a", 3]}, "/tags/1"),
                        ({"colour": "red"}, ""), ({"n": 1.5}, "/n")]:
        status, body = await post_task(home, {"skill": "about", "input": given})
        assert status == 400, (given, body)
        error = body["error"]
        assert error["code"] == "invalid_params"
        assert error["details"]["path"] == path, error
        assert error["message"].startswith(f"input{path}: ")
    assert await home.client().list_tasks() == before  # refused before any task was made


async def test_the_task_words_fill_a_text_property(swarm: Swarm) -> None:
    """As an MCP tool's arguments are filled: ``butler send --skill strict "words"``."""
    home = await start(swarm)
    status, task = await post_task(home, {"skill": "strict", "task": "words"})
    assert status == 200 and task["state"] == "completed", task
    status, body = await post_task(home, {"skill": "strict", "input": {}})
    assert status == 400 and body["error"]["details"]["path"] == "", body
    assert "'text' is a required property" in body["error"]["message"]


async def test_a2a_data_parts_are_checked_the_same_way(swarm: Swarm) -> None:
    home = await start(swarm)

    def message(data: dict[str, Any]) -> dict[str, Any]:
        return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                            "parts": [{"data": data}]}}

    status, body = await rpc(home, "SendMessage", message({"skill": "about", "input": {}}))
    assert status == 200 and body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    status, body = await rpc(home, "SendMessage",
                             message({"skill": "about", "input": {"n": "x"}}))
    assert body["error"]["code"] == -32602, body
    assert "input/n: " in body["error"]["message"]


@pytest.mark.parametrize(("broken", "why"), [
    ({"type": "object", "properties": {"n": {"type": "whole number"}}}, "is not valid"),
    ({"type": "object", "properties": {"n": {"$ref": "https://example.org/n.json"}}},
     "points outside the schema"),
])
def test_an_invalid_schema_in_the_config_names_the_key(tmp_path: Path, broken: dict[str, Any],
                                                       why: str) -> None:
    cfg, _ = config_dict(tmp_path, "home", skills=[
        plugin_skill("about", "tests.plugins.sample:about", input_schema=broken)])
    with pytest.raises(ConfigError, match="not a valid JSON Schema 2020-12") as err:
        load_config(write_config(tmp_path, "home", cfg))
    assert "input_schema" in str(err.value) and why in str(err.value)


def test_a_ref_to_nowhere_is_a_clear_refusal() -> None:
    check = SchemaCheck({"type": "object", "properties": {"n": {"$ref": "#/$defs/none"}}})
    with pytest.raises(RequestError, match="does not resolve"):
        check.check("", {"n": 1})
    assert SchemaCheck(SCHEMA).problem({"n": 2}) is None


def test_exact_numbers_are_json_numbers() -> None:
    """Butler reads JSON fractions as ``Decimal``: a number, and an integer when whole."""
    check = SchemaCheck(SCHEMA)
    check.check("", {"n": Decimal("3"), "ratio": Decimal("0.25")})
    with pytest.raises(RequestError) as err:
        check.check("", {"n": Decimal("2.5")})
    assert err.value.details["path"] == "/n"
    with pytest.raises(RequestError):
        check.check("", {"ratio": True})
    with pytest.raises(RequestError) as err:
        check.check("", {"tags": {"a/b": 1}})
    assert err.value.details["path"] == "/tags"
