"""The A2A 0.3 JSON-RPC methods (``message/send``, ``tasks/get``...) in 0.3 shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from internal.protocol.a2a.codec import a2a_v03, proto3
from internal.protocol.a2a.codec.card import encode_card_v03
from internal.protocol.a2a.model import (
    LEGACY_VERSION,
    ButlerError,
    Identity,
    RequestError,
    reply_message,
)
from internal.protocol.a2a.server._operations import A2AOperations, encoded_events, envelope_of

_PUSH = "tasks/pushNotificationConfig/"
# Codes 0.3 defines; newer A2A codes become -32603 for a 0.3 client, as the SDK does.
_V03_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003,
                        -32004, -32005, -32006, -32007})


class V03Dialect:
    version = LEGACY_VERSION
    methods = frozenset({
        "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
        _PUSH + "set", _PUSH + "get", _PUSH + "list", _PUSH + "delete",
        "agent/getAuthenticatedExtendedCard",
    })
    streaming = frozenset({"message/stream", "tasks/resubscribe"})

    def __init__(self, ops: A2AOperations) -> None:
        self.ops = ops

    def error(self, err: ButlerError) -> dict[str, Any]:
        code = err.rpc_code
        if -32099 <= code <= -32000 and code not in _V03_CODES:
            code = -32603
        return {"code": code, "message": err.message, "data": {"code": err.code, **err.details}}

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Any:
        ops = self.ops
        if method in ("message/send", "message/stream"):
            send = a2a_v03.decode_send_params(params)
            envelope = envelope_of(send, headers)
            if method == "message/stream":
                return encoded_events(a2a_v03.encode_event, ops.send_stream(caller, send, envelope))
            task = await ops.send(caller, send, envelope)
            if (reply := reply_message(task)) is not None:
                return a2a_v03.encode_message(reply)
            return a2a_v03.encode_task(task, history_length=send.history_length)
        if method == "agent/getAuthenticatedExtendedCard":
            return encode_card_v03(ops.card(caller))
        task_id = proto3.string(params, "id", "params", required=True, max_len=256) \
            if not method.endswith("/set") else ""
        if method == "tasks/get":
            length = proto3.integer(params, "historyLength", "params")
            return a2a_v03.encode_task(await ops.get(caller, task_id),
                                       history_length=length or None)
        if method == "tasks/cancel":
            return a2a_v03.encode_task(await ops.cancel(caller, task_id))
        if method == "tasks/resubscribe":
            return encoded_events(a2a_v03.encode_event, ops.subscribe(caller, task_id))
        return await self._push(method, caller, task_id, params)

    async def _push(self, method: str, caller: Identity, task_id: str,
                    params: dict[str, Any]) -> Any:
        if method.endswith("/set"):
            config = a2a_v03.decode_task_push_config(params)
            return a2a_v03.encode_push_config(await self.ops.create_push(caller, config))
        if method.endswith("/list"):
            return [a2a_v03.encode_push_config(c)
                    for c in await self.ops.list_push(caller, task_id)]
        config_id = proto3.string(params, "pushNotificationConfigId", "params", max_len=128)
        if method.endswith("/get"):
            if not config_id:  # 0.3 allowed asking for "the" config of a task
                configs = await self.ops.list_push(caller, task_id)
                if not configs:
                    raise RequestError("task_not_found",
                                       f"task {task_id} has no push notification config")
                return a2a_v03.encode_push_config(configs[0])
            return a2a_v03.encode_push_config(await self.ops.get_push(caller, task_id,
                                                                      config_id))
        if not config_id:
            raise proto3.bad("params.pushNotificationConfigId is required")
        await self.ops.delete_push(caller, task_id, config_id)
        return None
