"""One task's budget: what it started with, what is reserved, what was spent.

Invariant: spent + left == start, and a child never receives more than is left.
"""

from __future__ import annotations

from decimal import Decimal

from internal.protocol.a2a.model import Refusal

_ZERO = Decimal(0)  # once: Decimal("0") parses its text at each call, and this is per task


class BudgetLedger:
    def __init__(self, start: Decimal) -> None:
        self.start = start
        self._spent = _ZERO
        self._reserved = _ZERO

    @property
    def spent(self) -> Decimal:
        return self._spent

    @property
    def left(self) -> Decimal:
        """What may still be committed: start minus spent minus reservations."""
        return self.start - self._spent - self._reserved

    def reserve(self, amount: Decimal, what: str) -> Decimal:
        if amount < 0:
            raise ValueError("negative reservation")
        if amount > self.left:
            raise Refusal(
                "budget_exhausted",
                f"{what} needs {amount} USD but only {self.left} USD is left",
                details={"cost_usd": str(amount), "budget_left_usd": str(self.left)},
            )
        self._reserved += amount
        return amount

    def settle(self, reserved: Decimal, actual: Decimal) -> None:
        """Turn a reservation into spending; ``actual`` is clamped to what was reserved."""
        actual = max(_ZERO, min(actual, reserved))
        self._reserved -= reserved
        self._spent += actual
