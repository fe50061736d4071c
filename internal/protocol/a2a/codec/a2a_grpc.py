"""A2A 1.0 over gRPC: the specification's protobuf messages, as the proto3 JSON that
``a2a_v1`` already reads and writes, and errors as ``google.rpc.Status``.

The A2A 1.0 JSON wire *is* the proto3 JSON mapping of ``a2a.proto``, so a gRPC message
converts to exactly the dictionary a JSON-RPC or HTTP+JSON request decodes to, and back:
the gRPC binding needs no third codec. Only numbers differ: ``google.protobuf.Struct``
(metadata, data parts) holds doubles, which come back here as ``int`` when whole and as
exact ``Decimal`` otherwise, the types ``exact_json`` gives the other bindings.

Needs the ``grpc`` extra (grpcio, and the generated ``a2a_pb2`` of the a2a-sdk): import
this module only when gRPC is in use.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, json_format
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2, status_pb2

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError, RequestError

STATUS_DETAILS_KEY = "grpc-status-details-bin"
SERVICE = "lf.a2a.v1.A2AService"
M = TypeVar("M", bound=ProtoMessage)


def _exact(value: Any) -> Any:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return value


def to_json(message: ProtoMessage) -> dict[str, Any]:
    """A protobuf message as its proto3 JSON object (camelCase names, enum names)."""
    return _exact(json_format.MessageToDict(message))  # type: ignore[no-any-return]


def from_json(data: Any, into: M, *, lenient: bool = False) -> M:
    """Proto3 JSON (as ``a2a_v1`` writes it) into ``into``. ``lenient`` drops fields the
    message does not have: the card's 0.3 fields, a peer's extensions."""
    try:
        json_format.Parse(exact_json.dumps(data), into, ignore_unknown_fields=lenient)
    except json_format.ParseError as exc:
        raise RequestError("invalid_params", f"not a valid {type(into).__name__}: {exc}") \
            from None
    return into


def status_code(err: ButlerError) -> grpc.StatusCode:
    """The gRPC code of an error: its ``ERROR_TABLE`` row (the A2A specification's mapping
    for the errors it defines)."""
    return grpc.StatusCode[err.spec.grpc or "UNKNOWN"]


def error_status(err: ButlerError) -> tuple[grpc.StatusCode, str, list[tuple[str, str | bytes]]]:
    """Code, message and the trailing metadata: the ``google.rpc.Status`` with the error's
    ``ErrorInfo`` (reason, domain, and Butler's own code in its metadata), and
    ``retry-after`` (seconds) when the caller should wait."""
    code = status_code(err)
    reason, domain = err.spec.error_info(err.code)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=domain)
    info.metadata.update({k: v if isinstance(v, str) else exact_json.dumps(v)
                          for k, v in err.details.items()})
    info.metadata["code"] = err.code
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=err.message, details=[detail])
    trailing: list[tuple[str, str | bytes]] = [(STATUS_DETAILS_KEY, status.SerializeToString())]
    if err.retry_after is not None:
        trailing.append(("retry-after", str(max(1, math.ceil(err.retry_after)))))
    return code, err.message, trailing


def error_infos(trailing: Any) -> list[dict[str, Any]]:
    """The ``ErrorInfo`` details of a failed call's trailing metadata, as proto3 JSON
    (the shape ``peer_error`` reads from the other bindings)."""
    out: list[dict[str, Any]] = []
    for key, value in trailing or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except DecodeError:  # a peer's malformed details: its code and message remain
            return out
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                out.append({"reason": info.reason, "domain": info.domain,
                            "metadata": dict(info.metadata)})
    return out
