"""The OpenAPI documents themselves: valid OpenAPI 3.1, the same as their docs/ copies,
shipped in the package, naming only codes of ERROR_TABLE with their own status, and
covering exactly the routes the servers have."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, cast

import pytest
from jsonschema import Draft202012Validator
from schemathesis.specs.openapi.definitions import OPENAPI_31

from butler.dashboard import REGISTRY_PAGE
from butler.hosting.admin import ADMIN_AGENTS_PATH
from butler.overview import OVERVIEW_PATH, TASKS_PATH
from butler.registry.clock import ManualClock
from butler.registry.service import build_registry_app
from butler.registry.sqlite_store import SqliteStore
from internal.protocol.a2a.model import ERROR_TABLE
from internal.protocol.a2a.server import BUTLER_V2, RestBinding, RestLimits, TaskService
from tests.openapi_support import (
    DOC_COPIES,
    REGISTRY_V1,
    REPO,
    ApiDoc,
    docs_copy_text,
    packaged_text,
)
from tests.registry.registry_support import config as registry_config

DOCS = {"butler-v2": BUTLER_V2, "registry-v1": REGISTRY_V1}
pytestmark = pytest.mark.parametrize("which", list(DOCS.values()), ids=list(DOCS))


def test_docs_copy_is_the_packaged_document(which: tuple[str, str]) -> None:
    assert docs_copy_text(which) == packaged_text(which), (
        f"{DOC_COPIES[which].relative_to(REPO)} differs from the packaged {which[1]}: "
        f"copy the packaged file over it")


def test_document_is_openapi_3_1_with_valid_schemas(which: tuple[str, str]) -> None:
    doc = ApiDoc.packaged(which).doc
    Draft202012Validator(OPENAPI_31).validate(doc)
    assert doc["openapi"].startswith("3.1.")
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"}


def test_document_is_package_data(which: tuple[str, str]) -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"][which[0]]
    assert any(fnmatch(which[1], p) for p in patterns)


def test_every_error_has_its_code_and_status_from_error_table(which: tuple[str, str]) -> None:
    doc = ApiDoc.packaged(which)
    for method, template in doc.operations():
        for status in doc.statuses(method, template):
            codes = doc.error_codes(method, template, status)
            if status >= 400:
                assert codes, f"{method} {template} {status} lists no error code"
            for code in codes:
                assert code in ERROR_TABLE, f"{method} {template}: unknown code {code}"
                assert ERROR_TABLE[code].status == status, (
                    f"{method} {template} lists {code} under {status}, but ERROR_TABLE says "
                    f"{ERROR_TABLE[code].status}")


def test_operations_are_exactly_the_server_routes(which: tuple[str, str],
                                                  tmp_path: Path) -> None:
    doc = ApiDoc.packaged(which)
    documented = set(doc.operations())
    if which == BUTLER_V2:
        binding = RestBinding(cast(TaskService, None), RestLimits(32, 1.0, 50))
        served = {(r.method, r.path) for r in binding.routes()}
        daemon = {("GET", "/healthz"), ("GET", "/metrics"), ("GET", OVERVIEW_PATH),
                  ("GET", TASKS_PATH),
                  ("GET", ADMIN_AGENTS_PATH), ("POST", ADMIN_AGENTS_PATH),
                  ("DELETE", ADMIN_AGENTS_PATH + "/{id}")}
        assert served | daemon == documented
    else:
        served = _registry_routes(tmp_path)
        assert served == documented


def _registry_routes(tmp_path: Path) -> set[tuple[str, str]]:
    import asyncio

    async def routes() -> set[tuple[str, str]]:
        store = await SqliteStore.open(tmp_path / "registry.db")
        try:
            app = build_registry_app(registry_config(), store, ManualClock())
            found: set[tuple[str, str]] = set()
            for route in app.router.routes():
                info: Mapping[str, Any] = route.resource.get_info() if route.resource else {}
                path = info.get("path") or info.get("formatter")
                # The dashboard is a page for people, not an operation of the API.
                if route.method != "HEAD" and path and path not in REGISTRY_PAGE.paths:
                    found.add((route.method, path))
            return found
        finally:
            await store.close()

    return asyncio.run(routes())
