"""A task as its row keeps it (docs/tasks.md#storage): named columns and a keyed document.

The columns are what queries filter and sort on: ``id``, ``owner``, ``context_id``,
``state`` (its A2A name) and ``updated`` (microseconds since the epoch, for ordering:
``stamp_micros`` of the canonical stamp ``2026-11-24T01:52:18.123456Z`` Butler writes;
the time itself is in the document). The document is the JSON object of every other
field of ``Task``, by its field name, and so on down (a request, a part, a cost node):
a field left at its default is absent, a ``Decimal`` is its text, a tuple a list, an
enum its value. Encoding and decoding follow the dataclasses' own fields and type hints,
so a field added to ``Task`` (or any type it holds) is stored and read back with no edit
here (a request's A2A message is not: the task's messages hold it). Receipts are kept
as the JWS text they were signed as.

A float NaN or infinity is kept as ``null``, as every answer gives it. A task whose
document cannot be stored (a lone surrogate, a value JSON has no form for, nesting past
``MAX_DEPTH``) raises ``NotStorable`` from ``task_row``, before its row
joins any commit: it fails that task alone (``TaskEngine.apply``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import Part, RequestError, Task, TaskRequest

# Deepest nesting a document may have, a skill's data included; a row read back is
# parsed with the same bound.
MAX_DEPTH = 255
# ``updated`` of a task whose time is not in the store's canonical form: sorts first.
NOT_CANONICAL = 0
# The columns, in the order ``task_row`` gives them.
COLUMNS = ("id", "owner", "context_id", "state", "updated", "document")
_IN_COLUMNS = frozenset(COLUMNS[:4])

_EPOCH = datetime(1970, 1, 1)  # naive UTC: the canonical form has no offset to parse
_MICROSECOND = timedelta(microseconds=1)
_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", re.ASCII)


class NotStorable(RequestError):
    """A task whose row cannot be written; the message says which value and why. Where
    it is a skill's output the task fails alone (``output_not_storable``); where it is
    the request itself, the caller is told so (400)."""

    def __init__(self, why: str) -> None:
        super().__init__("invalid_params", f"the task cannot be stored: {why}")
        self.why = why


def task_row(task: Task) -> tuple[str, str, str, str, int, str]:
    """The row's values, in ``COLUMNS`` order; raises ``NotStorable``."""
    updated = stamp_micros(task.updated_at)
    document = _TASK.encode(task)
    for name in _IN_COLUMNS:
        document.pop(name, None)
    return (task.id, task.owner, task.context_id, task.state.value,
            NOT_CANONICAL if updated is None else updated, _dumps(document))


def sealed_row(task: Task) -> Callable[[tuple[str, ...]], tuple[str, str, str, str, int, str]]:
    """What makes the row of ``task`` (terminal) once its commit has made its receipt:
    given its receipts then, its own first. Its document is encoded now, so a task that
    cannot be stored raises ``NotStorable`` here, before its receipt joins the log."""
    updated = stamp_micros(task.updated_at)
    document = _TASK.encode(task)
    for name in _IN_COLUMNS:
        document.pop(name, None)
    _dumps(document)

    def with_receipts(receipts: tuple[str, ...]) -> tuple[str, str, str, str, int, str]:
        return (task.id, task.owner, task.context_id, task.state.value,
                NOT_CANONICAL if updated is None else updated,
                _dumps({**document, "receipts": list(receipts)}))

    return with_receipts


def task_from_row(task_id: str, owner: str, context_id: str, state: str,
                  document: str) -> Task:
    data = exact_json.loads(document, max_depth=MAX_DEPTH)
    if not isinstance(data, dict):
        raise ValueError(f"task {task_id}: its stored document is not a JSON object")
    data.update(id=task_id, owner=owner, context_id=context_id, state=state)
    task: Task = _TASK.decode(data)
    return task


def stamp_micros(stamp: str) -> int | None:
    """Microseconds since the epoch of a canonical stamp; None for any other text."""
    if _CANONICAL.fullmatch(stamp) is None:
        return None
    try:
        moment = datetime.fromisoformat(stamp[:26])
    except ValueError:  # no such day or time
        return None
    return (moment - _EPOCH) // _MICROSECOND


def micros_stamp(micros: int) -> str:
    """The canonical stamp of microseconds since the epoch."""
    return (_EPOCH + micros * _MICROSECOND).isoformat(timespec="microseconds") + "Z"


def _dumps(document: dict[str, Any]) -> str:
    """Strict JSON text of ``document``. orjson where it can: it refuses integers past 64
    bits, lone surrogates and nesting past its own bound, and writes a float NaN or
    infinity as ``null``, as every answer Butler sends does. Else the standard library,
    which writes big integers, and must then give UTF-8 text within ``MAX_DEPTH``."""
    try:
        return orjson.dumps(document, default=exact_json.json_default).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        text = json.dumps(_finite(document), default=exact_json.json_default, ensure_ascii=False,
                          separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotStorable("it holds a lone UTF-16 surrogate, which is not Unicode text: "
                          f"{exc.reason}") from None
    except RecursionError:
        raise NotStorable(f"it is nested deeper than {MAX_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise NotStorable(f"it holds a value JSON has no form for: {exc}") from None
    if exact_json.nesting(text) > MAX_DEPTH:
        raise NotStorable(f"it is nested deeper than {MAX_DEPTH} levels")
    return text


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None, as orjson writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# -- the codec of each type, made once from its type hints -----------------------------

Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


class _Field(typing.NamedTuple):
    name: str
    default: Any  # ``dataclasses.MISSING`` for a field without one: never left out
    inexact: bool  # a default equal values of other stored forms compare equal to
    encode: Convert
    decode: Convert


class _Fields:
    """A dataclass's codec: each field by name, a field at its default left out."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self._plan: list[_Field] | None = None

    def plan(self) -> list[_Field]:
        """Each field's codec; made on first use, so a type that holds itself (a cost
        node's children) is planned once its own codec exists."""
        if self._plan is None:
            hints = typing.get_type_hints(self.kind)
            plan = []
            for f in dataclasses.fields(self.kind):
                if (self.kind, f.name) in _NOT_STORED:
                    continue
                default = f.default if f.default_factory is dataclasses.MISSING \
                    else f.default_factory()
                encode, decode = _codec(hints[f.name])
                plan.append(_Field(f.name, default, isinstance(default, Decimal), encode,
                                   _READ_AS.get((self.kind, f.name), decode)))
            self._plan = plan
        return self._plan

    def encode(self, value: Any) -> dict[str, Any]:
        out = {}
        for name, default, inexact, encode, _ in self.plan():
            field_value = getattr(value, name)
            # Equal is not always stored alike: ``Decimal("0.00") == Decimal("0")``.
            if field_value is default or (
                    type(field_value) is type(default) and field_value == default
                    and not (inexact and str(field_value) != str(default))):
                continue
            out[name] = field_value if encode is _same else encode(field_value)
        return out

    def decode(self, data: dict[str, Any]) -> Any:
        fields = {name: decode(data[name]) for name, _, _, _, decode in self.plan()
                  if name in data}
        return self.kind(**fields)


@functools.cache
def _codec(kind: Any) -> tuple[Convert, Convert]:
    """(encode, decode) of a value of type ``kind``."""
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is types.UnionType:
        (inner,) = [k for k in typing.get_args(kind) if k is not type(None)]
        encode, decode = _codec(inner)
        if encode is _same and decode is _same:  # text, numbers, JSON data: None as it is
            return _same, _same
        return (lambda v: None if v is None else encode(v),
                lambda v: None if v is None else decode(v))
    if origin is tuple:
        encode, decode = _codec(typing.get_args(kind)[0])
        return (lambda v: [encode(item) for item in v],
                lambda v: tuple(decode(item) for item in v))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        codec = _Fields(kind)
        return codec.encode, codec.decode
    if kind is Decimal:
        return str, Decimal
    if kind is float:
        return _same, float
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        # A text enum (a task's state) is already its JSON text.
        return _same if issubclass(kind, str) else _enum_value, kind
    return _same, _same  # str, int, bool, JSON data (a part's, a skill's input)


def _enum_value(value: enum.Enum) -> Any:
    return value.value


# A field read back otherwise than its type says: a skill's input as the request decoder
# gave it, and a part's data and metadata as the skill made them, with ordinary numbers
# (``exact_json.loads`` reads fractions as Decimal, which /v2 would write as strings: not
# what the skill returned, nor what its receipt signed).
_READ_AS: dict[tuple[type, str], Convert] = {
    (TaskRequest, "input"): exact_json.plain_numbers,
    (Part, "data"): exact_json.plain_numbers,
    (Part, "metadata"): exact_json.plain_numbers}
# What a row does not keep: a request's A2A message is the task's first message
# (``Task.messages`` holds it); read back, the request has none.
_NOT_STORED = {(TaskRequest, "message")}
_TASK = _Fields(Task)
