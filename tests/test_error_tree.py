"""Every exception class of butler/ and internal/ joins the one error tree, and every
code-to-status mapping is read from its one table."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import butler
from internal.protocol.a2a.model import (
    ERROR_TABLE,
    ButlerError,
    DelegationFailed,
    SetupError,
    TaskFailed,
    code_for_http_status,
    error_from_code,
)


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    root = Path(butler.__file__).resolve().parent.parent
    # Files, not pkgutil: a folder without __init__.py (butler/skills) is a package too.
    for file in sorted([*(root / "butler").rglob("*.py"), *(root / "internal").rglob("*.py")]):
        parts = file.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        module = importlib.import_module(".".join(parts).removesuffix(".__init__"))
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__):
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_class_is_a_butler_error() -> None:
    classes = _exception_classes()
    assert "butler.skills.base.SkillFailed" in classes  # the walk found the modules
    outside = sorted(name for name, cls in classes.items()
                     if not issubclass(cls, ButlerError))
    assert outside == []


def test_errors_that_specialise_a_builtin_are_still_that_builtin() -> None:
    from butler.engine.workspace import WorkspaceError

    assert issubclass(WorkspaceError, ValueError) and issubclass(WorkspaceError, TaskFailed)


def test_codes_chosen_elsewhere_fall_back_to_one_row() -> None:
    from butler.registry.client import RegistryError
    from butler.skills.base import SkillFailed

    failed = SkillFailed("plugin_said_no", "no")
    assert (failed.code, failed.status, failed.rpc_code) == ("plugin_said_no", 500, -32603)
    registry = RegistryError("registry answered 401", status=401, code="unauthenticated")
    assert isinstance(registry, DelegationFailed) and registry.http_status == 401
    assert registry.code == "unauthenticated" and registry.status == 502


def test_every_row_names_its_google_rpc_status_and_bare_statuses_are_unique() -> None:
    for code, spec in ERROR_TABLE.items():
        assert spec.grpc, code
    assert code_for_http_status(413) == "payload_too_large"
    assert code_for_http_status(431) == "header_too_large"
    assert code_for_http_status(400) == "invalid_request"
    assert code_for_http_status(418) is None
    bare = [s for spec in ERROR_TABLE.values() for s in spec.for_http]
    assert len(bare) == len(set(bare))


def test_a_peer_cannot_answer_with_a_local_category() -> None:
    # Setup and task codes are this instance's own; from a peer they are its failure.
    for code in ("invalid_config", "skill_error"):
        err = error_from_code(code, "x")
        assert isinstance(err, DelegationFailed) and err.code == "peer_error"
    assert not isinstance(error_from_code("loop_detected", "x"), SetupError)
