"""The A2A 1.0 JSON-RPC methods: params and results in the 1.0 wire format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from internal.protocol.a2a.codec import a2a_v1, proto3
from internal.protocol.a2a.codec.card import encode_card
from internal.protocol.a2a.model import PROTOCOL_VERSION, ButlerError, Identity, reply_message
from internal.protocol.a2a.server._operations import A2AOperations, encoded_events, envelope_of

PUSH_METHODS = ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                "ListTaskPushNotificationConfigs", "ListTaskPushNotificationConfig",
                "DeleteTaskPushNotificationConfig")


class V1Dialect:
    version = PROTOCOL_VERSION
    methods = frozenset({
        "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
        "SubscribeToTask", "GetExtendedAgentCard", *PUSH_METHODS,
    })
    streaming = frozenset({"SendStreamingMessage", "SubscribeToTask"})

    def __init__(self, ops: A2AOperations) -> None:
        self.ops = ops

    def error(self, err: ButlerError) -> dict[str, Any]:
        return {"code": err.rpc_code, "message": err.message,
                "data": [a2a_v1.encode_error_info(err)]}

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Any:
        ops = self.ops
        ops.check_tenant(params)
        if method in ("SendMessage", "SendStreamingMessage"):
            send = a2a_v1.decode_send_params(params)
            envelope = envelope_of(send, headers)
            if method == "SendStreamingMessage":
                return encoded_events(a2a_v1.encode_event, ops.send_stream(caller, send, envelope))
            task = await ops.send(caller, send, envelope)
            if (reply := reply_message(task)) is not None:
                return {"message": a2a_v1.encode_message(reply)}
            return {"task": a2a_v1.encode_task(task, history_length=send.history_length)}
        if method == "GetTask":
            task = await ops.get(caller, _id(params, "id"))
            length = proto3.integer(params, "historyLength", "params")
            return a2a_v1.encode_task(task, history_length=length)
        if method == "ListTasks":
            query = a2a_v1.decode_list_query(params)
            return a2a_v1.encode_page(await ops.list_tasks(caller, query), query)
        if method == "CancelTask":
            return a2a_v1.encode_task(await ops.cancel(caller, _id(params, "id")))
        if method == "SubscribeToTask":
            return encoded_events(a2a_v1.encode_event, ops.subscribe(caller, _id(params, "id")))
        if method == "GetExtendedAgentCard":
            return encode_card(ops.card(caller))
        return await self._push(method, caller, params)

    async def _push(self, method: str, caller: Identity, params: dict[str, Any]) -> Any:
        task_id = _id(params, "taskId")
        if method == "CreateTaskPushNotificationConfig":
            config = a2a_v1.decode_push_config(params, "params", task_id=task_id)
            return a2a_v1.encode_push_config(await self.ops.create_push(caller, config))
        if method.startswith("List"):
            configs = await self.ops.list_push(caller, task_id)
            return {"configs": [a2a_v1.encode_push_config(c) for c in configs],
                    "nextPageToken": ""}
        config_id = _id(params, "id")
        if method == "GetTaskPushNotificationConfig":
            return a2a_v1.encode_push_config(await self.ops.get_push(caller, task_id, config_id))
        await self.ops.delete_push(caller, task_id, config_id)
        return None


def _id(params: Mapping[str, Any], name: str) -> str:
    return proto3.string(params, name, "params", required=True, max_len=256)
