"""schemathesis against both OpenAPI documents, on a live daemon and a live registry
(real ``butler serve`` and ``butler registry serve`` processes).

For every operation, positive and negative cases: no 5xx, no hang, every answer
conforms to the document (status, content type, headers, body schema), and every error
code is one the document lists for that operation and status.
BUTLER_FUZZ_EXAMPLES sets the examples per operation and mode (docs/operations.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
import yaml
from schemathesis import GenerationMode

from internal.protocol.a2a.server import BUTLER_V2
from tests.openapi_support import REGISTRY_V1, ApiDoc, LiveProcess, fuzz_operation
from tests.support import ECHO, config_dict, new_pair, write_config

EXAMPLES = int(os.environ.get("BUTLER_FUZZ_EXAMPLES", "25"))
DAEMON = ApiDoc.packaged(BUTLER_V2)
REGISTRY = ApiDoc.packaged(REGISTRY_V1)


def cases(doc: ApiDoc) -> list[tuple[str, str, GenerationMode]]:
    """Negative cases only where there is something to get wrong: parameters or a body."""
    return [(m, p, g) for m, p in sorted(doc.operations()) for g in GenerationMode
            if g is GenerationMode.POSITIVE or doc.takes_input(m, p)]


def ids(doc: ApiDoc) -> list[str]:
    return [f"{m} {p} {g.value}" for m, p, g in cases(doc)]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz-v2")
    # Only skills that finish at once: a task left waiting would keep a generated
    # GET .../events open until the request timeout.
    skills = [ECHO, {**ECHO, "id": "pricey", "capabilities": ["pricey"], "cost_usd": "2.50"}]
    cfg, tokens = config_dict(tmp, "home", skills=skills, extra={
        "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0}})
    server = LiveProcess(["serve", "-c", str(write_config(tmp, "home", cfg))],
                         tmp / "serve.log")
    try:
        yield server.url, tokens["operator"]
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz-v1")
    token, digest = new_pair()
    path = tmp / "registry.yaml"
    path.write_text(yaml.safe_dump({"registry": {
        "port": 0, "data_dir": str(tmp), "max_writes_per_minute": 1_000_000,
        "token_hashes": [{"sha256": digest, "name": "fuzzer"}]}}))
    server = LiveProcess(["registry", "serve", "-c", str(path)], tmp / "registry.log")
    try:
        yield server.url, token
    finally:
        server.stop()


@pytest.mark.parametrize("method,path,mode", cases(DAEMON), ids=ids(DAEMON))
def test_daemon_never_answers_outside_its_document(
    daemon: tuple[str, str], method: str, path: str, mode: GenerationMode,
) -> None:
    schema = schemathesis.openapi.from_dict(DAEMON.doc)
    fuzz_operation(DAEMON, schema, method, path, mode, base_url=daemon[0], token=daemon[1],
                   examples=EXAMPLES)


@pytest.mark.parametrize("method,path,mode", cases(REGISTRY), ids=ids(REGISTRY))
def test_registry_never_answers_outside_its_document(
    registry: tuple[str, str], method: str, path: str, mode: GenerationMode,
) -> None:
    schema = schemathesis.openapi.from_dict(REGISTRY.doc)
    fuzz_operation(REGISTRY, schema, method, path, mode, base_url=registry[0],
                   token=registry[1], examples=EXAMPLES)
