"""Input and output filters of a condensation function (dissertation 7.2.1, 7.2.4).

A filter compares a value with a lower and/or an upper threshold. As a *range check*
(``pass_outside=False``) it passes values in ``[low, high]``; as an *alarm*
(``pass_outside=True``) it passes values below ``low`` or above ``high``. An unset
bound is open. The input filter keeps events from reaching the trigger; the output
filter turns a periodic result into a sporadic or aperiodic one (e.g. an average
that is only published while it is out of band).

Values are compared as floats: an int as itself, a bool as 0 or 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gridstat.errors import ValidationError


def _check_bound(value: float | None, *, field: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        raise ValidationError(f"{field} must be a finite number, got {value!r}", field=field)


@dataclass(frozen=True, slots=True)
class ValueFilter:
    """Thresholds on a value; a disabled filter passes everything."""

    enabled: bool = False
    low: float | None = None
    high: float | None = None
    pass_outside: bool = False

    def validate(self, *, field: str) -> ValueFilter:
        """Check the bounds; ``field`` prefixes the offending field's name (``spec.input_filter``)."""
        _check_bound(self.low, field=f"{field}.low")
        _check_bound(self.high, field=f"{field}.high")
        if not self.enabled:
            return self
        if self.low is None and self.high is None:
            raise ValidationError(f"an enabled {field} needs low or high", field=f"{field}.low")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValidationError(f"{field}.low {self.low:g} is above {field}.high {self.high:g}",
                                  field=f"{field}.low")
        return self

    def passes(self, value: float) -> bool:
        """True if the value gets through (always, when the filter is disabled). NaN never passes."""
        if not self.enabled:
            return True
        if value != value:  # NaN: neither inside nor outside any band
            return False
        low, high = self.low, self.high
        if self.pass_outside:
            return (low is not None and value < low) or (high is not None and value > high)
        return (low is None or value >= low) and (high is None or value <= high)


#: The filter that passes everything.
PASS_ALL = ValueFilter()


def as_number(value: float | int | bool) -> float:
    """The float a filter compares: bools are 0 or 1."""
    return float(value)
