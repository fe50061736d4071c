"""Python entry points: ``package.module:function`` resolved at start-up."""

from __future__ import annotations

import importlib
import inspect

from butler.skills.base import SkillFunction
from butler.skills.fidelity import LOSSLESS
from internal.protocol.a2a.model import SetupError


class PluginError(SetupError):
    """A skill's ``python`` entry point cannot be used; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_plugin", message)


# A plugin is written against the whole SkillContext API.
FIDELITY = LOSSLESS


def load_plugin(ref: str) -> SkillFunction:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"cannot import {module_name}: {exc}") from None
    target: object = module
    for name in attr.split("."):
        target = getattr(target, name, None)
        if target is None:
            raise PluginError(f"{module_name} has no attribute {attr}")
    if not inspect.iscoroutinefunction(target):
        raise PluginError(f"{ref} must be an async function taking a SkillContext")
    fn: SkillFunction = target
    return fn
