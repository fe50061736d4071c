"""A skill's declared input schema (JSON Schema 2020-12): checked as a schema when the
config (or an MCP server's tool list) is read, and every task's input checked against it
before the task is made, on every binding (docs/tasks.md). Here, below the config and the
engine, so both read schemas the one way.

The validator is ``jsonschema``'s, imported when a skill first declares a schema: a
daemon or a CLI command without one never loads it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from internal.protocol.a2a.model import RequestError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

# Properties that take a task in words, in the order they are tried.
TEXT_ARGUMENTS = ("task", "text")


def with_text(schema: Mapping[str, Any], text: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with the task's words in the first ``task`` (else ``text``) string
    property the schema declares and ``given`` does not set: what the skill is asked."""
    args = dict(given)
    properties = schema.get("properties")
    if text and isinstance(properties, dict):
        for name in TEXT_ARGUMENTS:
            spec = properties.get(name)
            if isinstance(spec, dict) and spec.get("type") == "string":
                args.setdefault(name, text)
                break
    return args


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes ``schema`` no valid JSON Schema 2020-12, or None. A ``$ref`` must point
    inside the schema (``#...``): nothing is fetched to check an input."""
    from jsonschema.exceptions import SchemaError

    try:
        _validator_class().check_schema(schema)
    except SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path)
        return f"{err.message}" + (f" (at {where})" if where else "")
    outside = next(_outside_refs(schema), None)
    if outside is not None:
        return f"$ref {outside!r} points outside the schema (only '#...' is resolved)"
    return None


def _outside_refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            yield ref
        for value in node.values():
            yield from _outside_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _outside_refs(value)


class SchemaCheck:
    """A compiled schema: ``check`` refuses an input it does not describe, ``problem``
    says where a value fails it."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator: Validator = _validator_class()(schema)

    def check(self, text: str, given: Mapping[str, Any]) -> None:
        """Raises ``invalid_params`` naming the failing path (a JSON Pointer into the
        input: ``/items/0/name``; ``""`` for the input itself)."""
        found = self.problem(with_text(self.schema, text, given))
        if found is not None:
            pointer, message, schema_path = found
            raise RequestError("invalid_params", f"input{pointer}: {message}",
                               details={"path": pointer, "schema_path": schema_path})

    def problem(self, value: object) -> tuple[str, str, str] | None:
        """Where ``value`` fails the schema (a JSON Pointer), why, and which part of the
        schema says so; None when it conforms. The same reading serves a skill's output
        against its output schema."""
        from jsonschema.exceptions import best_match
        from referencing.exceptions import Unresolvable

        try:
            error = best_match(self._validator.iter_errors(value))
        except Unresolvable as exc:  # a "#..." $ref to nowhere in the schema
            return "", f"the schema has a $ref that does not resolve: {exc}", ""
        if error is None:
            return None
        pointer = "".join(f"/{_escape(p)}" for p in error.absolute_path)
        return pointer, error.message, "/".join(str(p) for p in error.absolute_schema_path)


def _escape(step: object) -> str:
    return str(step).replace("~", "~0").replace("/", "~1")


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12, where Butler's exact JSON fractions (``Decimal``) are numbers, and
    whole ones integers, as the JSON they were read from says."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    def is_number(checker: Any, value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int | float | Decimal)

    def is_integer(checker: Any, value: Any) -> bool:
        if isinstance(value, Decimal):
            return value.is_finite() and value == value.to_integral_value()
        return bool(Draft202012Validator.TYPE_CHECKER.is_type(value, "integer"))

    types = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": is_number, "integer": is_integer})
    return extend(Draft202012Validator, type_checker=types)
