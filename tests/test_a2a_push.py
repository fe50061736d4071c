"""A2A push notifications: config CRUD per task, delivery with the token and retries,
the SSRF guard at configuration and at delivery, durability across a restart."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    InvalidParamsError,
    ListTaskPushNotificationConfigsRequest,
    TaskNotFoundError,
    TaskPushNotificationConfig,
)
from aiohttp import web

from butler.config import load_config
from butler.daemon import Daemon
from butler.push.dispatcher import PushDispatcher
from internal.http import OutboundGuard, OutboundRules
from internal.protocol.a2a.model import OutboundRefused, PushConfig, TaskEvent
from tests.a2a_support import ASK, error_reason, plain_message, rpc, sdk_client
from tests.support import ECHO, Instance, Swarm, wait_task, wait_until

LOOPBACK_OK = {"push_guard": OutboundGuard(OutboundRules(allow_loopback=True))}
QUICK_STOP = {"server": {"shutdown_grace_seconds": 0.2}}  # tasks left waiting for input


@dataclass
class Webhook:
    """A real HTTP server recording what it receives; ``fail`` answers first."""

    url: str = ""
    received: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    fail: list[int] = field(default_factory=list)
    redirect_to: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.json()))
        if self.redirect_to:
            raise web.HTTPFound(self.redirect_to)
        if self.fail:
            return web.Response(status=self.fail.pop(0))
        return web.Response(status=204)

    async def wait_for(self, count: int, timeout: float = 10.0) -> None:
        await wait_until(lambda: len(self.received) >= count, timeout)


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook()
    app = web.Application()
    app.add_routes([web.post("/hook", hook.handle)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()


def states(hook: Webhook) -> list[str]:
    return [body["statusUpdate"]["status"]["state"] for _, body in hook.received]


async def ask_task(home: Instance) -> str:
    _, body = await rpc(home, "SendMessage", {"message": plain_message(
        "hi", metadata={"skill": "ask"})})
    return str(body["result"]["task"]["id"])


async def test_crud_with_the_sdk_client_and_delivery(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    task_id = await ask_task(home)
    async with webhook() as hook, sdk_client(home) as client:
        created = await client.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task_id, url=hook.url, token="hook-secret",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="cred")))
        assert created.id and created.task_id == task_id and created.token == "hook-secret"
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id=created.id))
        assert got.url == hook.url
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        assert [c.id for c in listed.configs] == [created.id]

        _, body = await rpc(home, "SendMessage", {"message": plain_message(
            "Ada", taskId=task_id)})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await hook.wait_for(2)
        assert states(hook) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        headers, body = hook.received[-1]
        assert headers["X-A2A-Notification-Token"] == "hook-secret"
        assert headers["Authorization"] == "Bearer cred"
        assert body["statusUpdate"]["taskId"] == task_id

        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=created.id))
        # Deleting is idempotent (A2A 3.1.10); only a missing task is an error.
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=created.id))
        with pytest.raises(TaskNotFoundError):
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id="no-such-task", id="c"))
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id=created.id))
        with pytest.raises(TaskNotFoundError):
            await client.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id="no-such-task", url=hook.url))


async def test_config_in_send_message_and_retries(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    async with webhook() as hook:
        hook.fail = [503, 503]
        _, body = await rpc(home, "SendMessage", {
            "message": plain_message("hi", metadata={"skill": "ask"}),
            "configuration": {"taskPushNotificationConfig": {"url": hook.url, "token": "t"}}})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        await hook.wait_for(3)  # input-required: 503, 503, then delivered
        assert states(hook) == ["TASK_STATE_INPUT_REQUIRED"] * 3
        assert all(h["X-A2A-Notification-Token"] == "t" for h, _ in hook.received)
        _, body = await rpc(home, "SendMessage", {"message": plain_message(
            "Ada", taskId=body["result"]["task"]["id"])})
        await hook.wait_for(5)
        assert states(hook)[3:] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]


async def test_rest_push_routes(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    task_id = await ask_task(home)
    headers = {**home.headers(), "A2A-Version": "1.0"}
    base = f"{home.url}/tasks/{task_id}/pushNotificationConfigs"
    async with home.session.post(base, json={"id": "c1", "url": "http://127.0.0.1:9/h"},
                                 headers=headers) as resp:
        assert resp.status == 200 and (await resp.json())["id"] == "c1"
    async with home.session.get(base, headers=headers) as resp:
        assert [c["id"] for c in (await resp.json())["configs"]] == ["c1"]
    for _ in range(2):  # idempotent
        async with home.session.delete(base + "/c1", headers=headers) as resp:
            assert resp.status == 200 and await resp.json() == {}
    async with home.session.get(base + "/c1", headers=headers) as resp:
        assert resp.status == 404


REFUSED = [
    "http://127.0.0.1:8080/hook", "http://localhost/hook", "http://[::1]/hook",
    "http://169.254.169.254/latest/meta-data", "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook", "http://10.1.2.3/hook", "http://192.168.1.5/hook",
    "http://100.64.0.1/hook", "http://0.0.0.0/hook", "ftp://example.com/hook",
    "http://user:pw@example.com/hook", "http://224.0.0.1/hook",
]


async def test_ssrf_guard_refuses_webhooks(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], extra=QUICK_STOP)
    task_id = await ask_task(home)
    for url in REFUSED:
        status, body = await rpc(home, "CreateTaskPushNotificationConfig",
                                 {"taskId": task_id, "url": url})
        assert status == 200 and body["error"]["code"] == -32602, (url, body)
        assert error_reason(body["error"]) == "OUTBOUND_REFUSED"
        # Refused in a SendMessage too, before any task is created.
        _, body = await rpc(home, "SendMessage", {"message": plain_message(), "configuration": {
            "taskPushNotificationConfig": {"url": url}}})
        assert body["error"]["code"] == -32602, (url, body)
    _, listed = await rpc(home, "ListTasks", {})
    assert listed["result"]["totalSize"] == 1


async def test_private_networks_when_allowed(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], extra=QUICK_STOP, configurations={
        "a2a": {"push_notifications": {"allow_private_networks": True}}})
    task_id = await ask_task(home)
    _, body = await rpc(home, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "url": "http://10.1.2.3/hook"})
    assert body["result"]["url"] == "http://10.1.2.3/hook"
    _, body = await rpc(home, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "url": "http://127.0.0.1/hook"})
    assert body["error"]["code"] == -32602  # loopback stays refused


async def test_delivery_checks_again_and_never_follows_redirects() -> None:
    event_task = _task()
    async with webhook() as hook, webhook() as other:
        # A config stored before the rules changed (or behind DNS) is refused at delivery.
        strict = PushDispatcher(OutboundGuard(), max_attempts=2, timeout=2, backoff=0.01)
        config = PushConfig(id="c", task_id="t", url=hook.url)
        assert not await strict.deliver(config, TaskEvent(event_task, "status"))
        assert hook.received == []
        await strict.aclose()
        lenient = PushDispatcher(OutboundGuard(OutboundRules(allow_loopback=True)),
                                 max_attempts=3, timeout=2,
                                 backoff=0.01)
        hook.redirect_to = other.url
        assert not await lenient.deliver(config, TaskEvent(event_task, "status"))
        assert len(hook.received) == 1 and other.received == []
        await lenient.aclose()


async def test_guarded_resolver_refuses_names_that_resolve_to_loopback() -> None:
    resolver = OutboundGuard().resolver()
    with pytest.raises(OutboundRefused, match="loopback"):
        await resolver.resolve("localhost", 80)
    await resolver.close()


async def test_v03_push_methods_and_payload(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    task_id = await ask_task(home)
    async with webhook() as hook:
        _, body = await rpc(home, "tasks/pushNotificationConfig/set", {
            "taskId": task_id, "pushNotificationConfig": {"url": hook.url, "token": "old"}},
            version="0.3")
        config_id = body["result"]["pushNotificationConfig"]["id"]
        _, body = await rpc(home, "tasks/pushNotificationConfig/get", {"id": task_id},
                            version="0.3")
        assert body["result"]["pushNotificationConfig"]["url"] == hook.url
        _, body = await rpc(home, "tasks/pushNotificationConfig/list", {"id": task_id},
                            version="0.3")
        assert [c["pushNotificationConfig"]["id"] for c in body["result"]] == [config_id]
        await rpc(home, "message/send", {"message": {
            "kind": "message", "messageId": "m", "role": "user", "taskId": task_id,
            "parts": [{"kind": "text", "text": "Bob"}]}}, version="0.3")
        await hook.wait_for(2)
        assert [b["status"]["state"] for _, b in hook.received] == ["working", "completed"]
        assert hook.received[-1][1]["kind"] == "task"
        for _ in range(2):  # idempotent
            _, body = await rpc(home, "tasks/pushNotificationConfig/delete", {
                "id": task_id, "pushNotificationConfigId": config_id}, version="0.3")
            assert body["result"] is None


async def test_configs_survive_a_restart(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    task_id = await ask_task(home)
    await rpc(home, "CreateTaskPushNotificationConfig",
              {"taskId": task_id, "id": "keep", "url": "http://127.0.0.1:9/h"})
    await swarm.stop(home)
    again = Daemon(load_config(home.config_path), **LOOPBACK_OK)  # type: ignore[arg-type]
    await again.start()
    try:
        assert again.push is not None
        configs = await again.push.store.list_configs(task_id)
        assert [c.id for c in configs] == ["keep"]
    finally:
        await again.stop()


async def test_push_can_be_turned_off(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], extra=QUICK_STOP, configurations={
        "a2a": {"push_notifications": {"enabled": False}}})
    task_id = await ask_task(home)
    _, body = await rpc(home, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "url": "https://example.com/h"})
    assert body["error"]["code"] == -32003
    async with home.session.get(home.url + "/.well-known/agent-card.json") as resp:
        assert (await resp.json())["capabilities"]["pushNotifications"] is False
    async with sdk_client(home) as client:
        with pytest.raises(InvalidParamsError):
            await client.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id=task_id, url="https://example.com/h", id="x" * 200))
    await wait_task(home, task_id, {"input-required"})


def _task() -> Any:
    from internal.protocol.a2a.model import StatusEntry, Task, TaskRequest, TaskState

    return Task(id="t", context_id="c", owner="o", state=TaskState.WORKING,
                request=TaskRequest(), created_at="2026-01-01T00:00:00.000000Z",
                updated_at="2026-01-01T00:00:00.000000Z",
                history=(StatusEntry(TaskState.WORKING, "2026-01-01T00:00:00.000000Z"),))


async def test_configs_go_when_their_task_is_purged(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra={**QUICK_STOP, "tasks": {"retention_hours": 0.0002}})
    task_id = await ask_task(home)
    await rpc(home, "CreateTaskPushNotificationConfig",
              {"taskId": task_id, "id": "gone", "url": "http://127.0.0.1:9/h"})
    async with home.session.post(f"{home.url}/v2/tasks/{task_id}/cancel",
                                 headers=home.headers()) as resp:
        assert resp.status == 200
    push = home.daemon.push
    assert push is not None
    assert push.dispatcher.configs(task_id)
    async def purged() -> bool:  # retention is 0.72 s; the purge runs every second
        return not await push.store.list_configs(task_id)

    await wait_until(purged)
    assert push.dispatcher.configs(task_id) == {}  # gone from memory too


async def test_loopback_webhooks_are_an_explicit_opt_in(
        swarm: Swarm, caplog: pytest.LogCaptureFixture) -> None:
    """``push_notifications.allow_loopback`` (off by default, warned at start-up) lets a
    developer receive pushes on this machine."""
    caplog.set_level(logging.WARNING, logger="butler.push")
    refusing = await swarm.start("refusing", skills=[ECHO, ASK], extra=QUICK_STOP)
    assert not [r for r in caplog.records if "allow_loopback" in r.getMessage()]
    async with webhook() as hook:
        task_id = await ask_task(refusing)
        _, body = await rpc(refusing, "CreateTaskPushNotificationConfig",
                            {"taskId": task_id, "url": hook.url})
        assert body["error"]["code"] == -32602
        assert "allow_loopback" in body["error"]["message"]

        home = await swarm.start("home", skills=[ECHO, ASK], extra=QUICK_STOP, configurations={
            "a2a": {"push_notifications": {"allow_loopback": True}}})
        assert any("allow_loopback" in r.getMessage() for r in caplog.records)
        task_id = await ask_task(home)
        _, body = await rpc(home, "CreateTaskPushNotificationConfig",
                            {"taskId": task_id, "url": hook.url})
        assert "error" not in body, body
        await rpc(home, "SendMessage", {"message": plain_message("Ada", taskId=task_id)})
        await hook.wait_for(2)
        assert states(hook) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]


async def test_a_delivery_that_raises_does_not_end_the_task_s_worker(
        swarm: Swarm, caplog: pytest.LogCaptureFixture) -> None:
    """A config whose delivery raises something unexpected (credentials with a line break,
    which aiohttp refuses to put in a header) is logged; the task's other webhook still
    gets every update, in order."""
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs=LOOPBACK_OK,
                             extra=QUICK_STOP)
    async with webhook() as bad, webhook() as good:
        task_id = await ask_task(home)
        for config_id, hook, auth in (("bad", bad, {"scheme": "Bearer",
                                                     "credentials": "x\r\nX-Injected: 1"}),
                                      ("good", good, None)):
            params: dict[str, Any] = {"taskId": task_id, "id": config_id, "url": hook.url}
            if auth:
                params["authentication"] = auth
            _, body = await rpc(home, "CreateTaskPushNotificationConfig", params)
            assert "error" not in body, body
        with caplog.at_level(logging.ERROR, logger="butler.push"):
            await rpc(home, "SendMessage", {"message": plain_message("Ada", taskId=task_id)})
            await good.wait_for(2)
        assert states(good) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        assert bad.received == []
        assert "failed unexpectedly" in caplog.text
