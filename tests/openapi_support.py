"""Checking real answers against the OpenAPI documents, with jsonschema (no mocks).

Also a daemon or registry as a real child process, for blocking clients.
"""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import requests
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from internal.http import load
from internal.protocol.a2a.server import BUTLER_V2
from tests.support import child_env

REPO = Path(__file__).resolve().parent.parent
REGISTRY_V1 = ("butler.registry", "openapi.yaml")
# packaged document -> its copy under docs/
DOC_COPIES = {BUTLER_V2: REPO / "docs/openapi/butler-v2.yaml",
              REGISTRY_V1: REPO / "docs/openapi/registry-v1.yaml"}


class ApiDoc:
    """One OpenAPI document: which statuses an operation documents, and whether an
    answer (status, headers, body) matches what it documents."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    @classmethod
    def packaged(cls, which: tuple[str, str]) -> ApiDoc:
        return cls(load(*which))

    def operations(self) -> Iterator[tuple[str, str]]:
        """(METHOD, path template) of every operation."""
        for path, item in self.doc["paths"].items():
            for method in item:
                if method in ("get", "put", "post", "delete", "patch"):
                    yield method.upper(), path

    def operation(self, method: str, template: str) -> dict[str, Any]:
        try:
            op: dict[str, Any] = self.doc["paths"][template][method.lower()]
        except KeyError:
            raise AssertionError(f"{method} {template} is not documented") from None
        return op

    def resolve(self, node: Mapping[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            target: Any = self.doc
            for key in node["$ref"].removeprefix("#/").split("/"):
                target = target[key.replace("~1", "/").replace("~0", "~")]
            node = target
        return dict(node)

    def takes_input(self, method: str, template: str) -> bool:
        op = self.operation(method, template)
        item = self.doc["paths"][template]
        return bool(op.get("parameters") or item.get("parameters") or op.get("requestBody"))

    def statuses(self, method: str, template: str) -> set[int]:
        return {int(s) for s in self.operation(method, template)["responses"]}

    def response(self, method: str, template: str, status: int) -> dict[str, Any]:
        responses = self.operation(method, template)["responses"]
        if str(status) not in responses:
            raise AssertionError(f"{method} {template} answered {status}, which it does not "
                                 f"document (documented: {sorted(responses)})")
        return self.resolve(responses[str(status)])

    def error_codes(self, method: str, template: str, status: int) -> set[str]:
        """The error codes the document lists for this status of this operation."""
        content = self.response(method, template, status).get("content", {})
        schema = content.get("application/json", {}).get("schema")
        return _codes(self, schema) if schema is not None else set()

    def validator(self, schema: Mapping[str, Any]) -> Draft202012Validator:
        # "#/components/..." references resolve against the root of the schema validated.
        return Draft202012Validator({**schema, "components": self.doc["components"]})

    def check(self, method: str, template: str, status: int, headers: Mapping[str, str],
              body: bytes) -> Any:
        """Assert the answer is one the document describes; return the decoded body."""
        where = f"{method} {template} -> {status}"
        response = self.response(method, template, status)
        lower = {k.lower(): v for k, v in headers.items()}
        for name, spec in response.get("headers", {}).items():
            spec = self.resolve(spec)
            value = lower.get(name.lower())
            if value is None:
                assert not spec.get("required"), f"{where}: header {name} missing"
                continue
            schema = self.resolve(spec["schema"])
            decoded: Any = int(value) if schema.get("type") == "integer" else value
            _validate(self, spec["schema"], decoded, f"{where} header {name}")
        content = response.get("content")
        if not content:
            assert body == b"", f"{where}: documents no body, got {body[:200]!r}"
            return None
        media = lower.get("content-type", "").split(";")[0].strip()
        assert media in content, f"{where}: content type {media!r}, documented {list(content)}"
        if media != "application/json":
            return body.decode("utf-8")
        data = json.loads(body)
        _validate(self, content[media]["schema"], data, where)
        return data


def _validate(doc: ApiDoc, schema: Mapping[str, Any], value: Any, where: str) -> None:
    errors = sorted(doc.validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        shown = json.dumps(value)[:500]
        raise AssertionError(f"{where}: {errors[0].message} at {list(errors[0].path)}\n{shown}")


def _codes(doc: ApiDoc, schema: Mapping[str, Any]) -> set[str]:
    """Codes named by ``error.code`` enums and consts, through ``$ref`` and ``allOf``."""
    schema = doc.resolve(schema)
    found: set[str] = set()
    for part in (*schema.get("allOf", []), *schema.get("oneOf", [])):
        found |= _codes(doc, part)
    props = schema.get("properties", {})
    # ``{"error": {"code"}}``, or ARD's ``{"errorCode"}`` on the registry's ARD routes.
    code = props.get("errorCode") or props.get("error", {}).get("properties", {}).get("code", {})
    if "const" in code:
        found.add(code["const"])
    found |= set(code.get("enum", []))
    return found


def error_code(data: Any) -> str:
    """An error answer's code: ``error.code``, or ARD's ``errorCode``."""
    return str(data["error"]["code"] if "error" in data else data["errorCode"])


def fuzz_operation(doc: ApiDoc, schema: Any, method: str, path: str, mode: Any, *,
                   base_url: str, token: str, examples: int) -> None:
    """schemathesis cases for one operation: no 5xx, no hang, and every answer one the
    document describes, with an error code it lists for that operation and status."""
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_headers_conformance, response_schema_conformance]
    auth = {"Authorization": f"Bearer {token}"}
    with requests.Session() as session:
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=schema[path][method].as_strategy(mode))
        def fuzz(case: Any) -> None:
            response = case.call(base_url=base_url, session=session, headers=auth, timeout=10)
            case.validate_response(response, checks=checks)
            if response.status_code >= 400:
                code = error_code(response.json())
                listed = doc.error_codes(method, path, response.status_code)
                assert code in listed, (f"{code} is not listed for {method} {path} "
                                        f"{response.status_code}: {sorted(listed)}")

        fuzz()


def docs_copy_text(which: tuple[str, str]) -> str:
    return DOC_COPIES[which].read_text(encoding="utf-8")


def packaged_text(which: tuple[str, str]) -> str:
    return resources.files(which[0]).joinpath(which[1]).read_text(encoding="utf-8")


class LiveProcess:
    """``python -m butler ...`` serving on a real port, for the length of a test module.

    A separate process, so a blocking client in the test (schemathesis uses
    ``requests``) shares nothing with the server: not the event loop, not ``random``.
    """

    def __init__(self, args: list[str], log_path: Path) -> None:
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "butler", *args], stdout=subprocess.PIPE, stderr=log,
                cwd=REPO, env=child_env())
        assert self.proc.stdout is not None
        ready = select.select([self.proc.stdout], [], [], 30)[0]
        line = self.proc.stdout.readline().decode() if ready else ""
        match = re.search(r"(https?://\S+)", line)
        if match is None:
            self.stop()
            raise AssertionError(f"server did not start: {line!r}\n{log_path.read_text()}")
        self.url = match.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
