"""Numeric arguments that must be finite and in range (`nan`, `inf` and `1e400` parse as floats), checked
the same way from the CLI (a click type: a one-line usage error naming the option) and the Python API
(`InputError` naming the argument)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

from .errors import InputError

# Every number these check is a duration in days or hours: a million of either stays within the dates
# Python can represent (a larger one overflowed after the command's commit, exit 1)
MAXIMUM = 1_000_000.0


def finite(name: str, value: float, *, minimum: float = 0.0, maximum: float = MAXIMUM) -> float:
    """`value` as a float when it is a finite number in [minimum, maximum]; else InputError naming `name`."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name} must be a number, found {value!r}", argument=name) from None
    if not math.isfinite(number) or not minimum <= number <= maximum:
        raise InputError(f"{name} must be a finite number in [{minimum:g}, {maximum:,.0f}], found {value!r}",
                         argument=name)
    return number


if TYPE_CHECKING:  # generic since click 8.2; pyproject allows 8.1, so subscript only for the checker
    _ParamType = click.ParamType[float, Any]
else:
    _ParamType = click.ParamType


class FiniteFloat(_ParamType):
    """A click option type: a finite float in [minimum, maximum] (click's own FloatRange lets nan through)."""

    name = "number"

    def __init__(self, minimum: float = 0.0, maximum: float = MAXIMUM) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or not self.minimum <= number <= self.maximum:
            self.fail(f"{value!r} is not a finite number in [{self.minimum:g}, {self.maximum:,.0f}]", param, ctx)
        return number
