"""A token entry's ``limits``: what that caller may run, and its caps across task trees."""

from __future__ import annotations

from decimal import Decimal

from butler.config.common import ident
from butler.config.model import CallerLimits
from butler.config.node import Node

_COUNTS = ("max_tasks_per_hour", "max_tasks_per_day")
_AMOUNTS = ("max_usd_per_task", "max_usd_per_hour", "max_usd_per_day")
KEYS = {"skills", "capabilities", *_COUNTS, *_AMOUNTS}


def parse_caller_limits(node: Node) -> CallerLimits:
    k = node.mapping(KEYS)
    counts = {key: k[key].integer(minimum=1) for key in _COUNTS if key in k}
    amounts = {key: _positive(k[key]) for key in _AMOUNTS if key in k}
    limits = CallerLimits(
        skills=_names(k["skills"]) if "skills" in k else None,
        capabilities=_names(k["capabilities"]) if "capabilities" in k else None,
        max_tasks_per_hour=counts.get("max_tasks_per_hour"),
        max_tasks_per_day=counts.get("max_tasks_per_day"),
        max_usd_per_task=amounts.get("max_usd_per_task"),
        max_usd_per_hour=amounts.get("max_usd_per_hour"),
        max_usd_per_day=amounts.get("max_usd_per_day"))
    _ordered(k, "max_tasks_per_hour", "max_tasks_per_day")
    _ordered(k, "max_usd_per_task", "max_usd_per_hour")
    _ordered(k, "max_usd_per_task", "max_usd_per_day")
    _ordered(k, "max_usd_per_hour", "max_usd_per_day")
    return limits


def _positive(node: Node) -> Decimal:
    amount = node.money()
    if amount == 0:
        # A cap of 0 would refuse every task: revoking the token says that plainly.
        node.fail("must be more than 0 (leave the key out for no cap; remove the token "
                  "to refuse the caller)")
    return amount


def _names(node: Node) -> tuple[str, ...]:
    return tuple(ident(item) for item in node.items())


def _ordered(k: dict[str, Node], smaller: str, larger: str) -> None:
    """A cap over a shorter span above the longer span's cap can never be reached: it is
    a typo, most likely."""
    if smaller in k and larger in k:
        low = k[smaller].integer() if smaller in _COUNTS else k[smaller].money()
        high = k[larger].integer() if larger in _COUNTS else k[larger].money()
        if low > high:
            k[smaller].fail(f"is more than {larger} ({high}), so it could never be reached")
