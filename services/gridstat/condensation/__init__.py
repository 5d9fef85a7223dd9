"""Condensation functions (dissertation chapter 7): n inputs in, one new status variable out.

A condensation function runs the pipeline of Fig 7.2 near its inputs' sources:

    input filter -> trigger (time | x of n events | x alerts) -> calculator -> output filter

and its output is published as a new status variable with its own interval and QoS, so
subscribers get a condensed stream instead of all the inputs. This package is the pure
engine (no I/O, no clock): ``spec`` validates a specification, ``filters``, ``triggers``
and ``calculators`` are the modules of the pipeline (built-in calculators and the
``gridstat.calculators`` entry-point registry) and ``function.CondensationFunction`` runs
it. Its hosts are a status router's slot (``gridstat.router.condensation``, placed by the
leaf broker, ``gridstat.broker.condensing``) and the standalone condensation host role
(``gridstat condense host``, ``gridstat.cli.condense``).

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""

from gridstat.condensation.calculators import (
    BUILTINS,
    ENTRY_POINT_GROUP,
    Calculator,
    CalculatorSetup,
    InputInfo,
    InputTable,
    InputValue,
)
from gridstat.condensation.filters import ValueFilter
from gridstat.condensation.function import CondensationFunction, FunctionCounters, Output
from gridstat.condensation.spec import CondensationSpec, spec_from_mapping, spec_from_message
from gridstat.condensation.triggers import Trigger, TriggerKind

#: Name prefix of the pseudo outgoing channel a router slot is routed to ("cf:<function_id>").
CHANNEL_PREFIX = "cf:"


def channel_name(function_id: str) -> str:
    """The pseudo channel of a function in a router's routing table."""
    return f"{CHANNEL_PREFIX}{function_id}"


__all__ = [
    "BUILTINS",
    "CHANNEL_PREFIX",
    "ENTRY_POINT_GROUP",
    "Calculator",
    "CalculatorSetup",
    "CondensationFunction",
    "CondensationSpec",
    "FunctionCounters",
    "InputInfo",
    "InputTable",
    "InputValue",
    "Output",
    "Trigger",
    "TriggerKind",
    "ValueFilter",
    "channel_name",
    "spec_from_mapping",
    "spec_from_message",
]
