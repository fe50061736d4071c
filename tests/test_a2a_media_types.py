"""A skill's input modes (A2A 3.1.1): a part of a media type the chosen skill does not
take is refused with ContentTypeNotSupportedError (-32005, HTTP 415) before anything
runs; the modes are on the card."""

from __future__ import annotations

import base64

import pytest
from a2a.types import ContentTypeNotSupportedError, Part, TaskState

from tests.a2a_support import rpc, sdk_client, send_request, send_task, text, user_message
from tests.support import ECHO, Swarm

WORDS = {"id": "words", "builtin": "echo", "capabilities": ["words"], "expose": True,
         "input_modes": ["text/plain"]}
PICTURES = {"id": "pictures", "builtin": "echo", "capabilities": ["pictures"], "expose": True,
            "input_modes": ["image/*"], "output_modes": ["text/plain"]}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


def png_part() -> dict[str, str]:
    return {"raw": PNG, "mediaType": "image/png", "filename": "a.png"}


async def test_a_part_the_skill_does_not_take_is_refused(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, WORDS, PICTURES])
    _, body = await rpc(home, "SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [png_part()],
        "metadata": {"skill": "words"}}})
    error = body["error"]
    assert error["code"] == -32005 and "image/png" in error["message"]
    assert error["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    async with home.session.post(home.url + "/message:send", headers={
            **home.headers(), "A2A-Version": "1.0"}, json={"message": {
            "messageId": "m2", "role": "ROLE_USER", "parts": [png_part()],
            "metadata": {"skill": "words"}}}) as resp:
        assert resp.status == 415
        assert (await resp.json())["error"]["details"][0]["reason"] == \
            "CONTENT_TYPE_NOT_SUPPORTED"
    async with home.session.get(home.url + "/v2/tasks", headers=home.headers()) as resp:
        assert (await resp.json())["tasks"] == []  # nothing was created

    # The skill that takes images runs it; and refuses text.
    _, body = await rpc(home, "SendMessage", {"message": {
        "messageId": "m3", "role": "ROLE_USER", "parts": [png_part()],
        "metadata": {"skill": "pictures"}}})
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
    async with sdk_client(home) as client:
        message = user_message(text("words"), metadata={"skill": "pictures"})
        with pytest.raises(ContentTypeNotSupportedError):
            await send_task(client, send_request(message))
        fine = user_message(Part(raw=b"\x89PNG", media_type="image/png"),
                            metadata={"skill": "pictures"})
        task = await send_task(client, send_request(fine))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED


async def test_the_card_shows_a_skill_s_modes_when_they_differ(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, WORDS, PICTURES])
    async with home.session.get(home.url + "/.well-known/agent-card.json",
                                headers={"A2A-Version": "1.0"}) as resp:
        card = await resp.json()
    by_id = {s["id"]: s for s in card["skills"]}
    assert by_id["pictures"]["inputModes"] == ["image/*"]
    assert by_id["pictures"]["outputModes"] == ["text/plain"]
    assert by_id["words"]["inputModes"] == ["text/plain"]
    assert by_id["echo"]["inputModes"] == ["*/*"]  # echo takes anything
    assert "outputModes" not in by_id["echo"]  # the card's defaults
