"""The telemetry package's errors: one family under ``GridStatError``.

Export itself never raises into a role: a record that cannot be delivered is counted as lost
by reason (``exporting.LossReason``). These errors are for the callers that configure or own
an exporter (bad settings, a stopped exporter, a flush that ran out of time).
"""

from __future__ import annotations

from gridstat.errors import GridStatError


class TelemetryError(GridStatError):
    """Base of the telemetry errors."""

    reason = "TelemetryError"


class TelemetryClosed(TelemetryError):
    """The exporter was stopped; it cannot be started again (stop is irreversible)."""

    reason = "TelemetryClosed"


class KafkaUnavailable(TelemetryError):
    """Kafka did not answer in time; records stay buffered (up to the bound) and export resumes later."""

    reason = "KafkaUnavailable"
    retriable = True


class FlushTimeout(TelemetryError):
    """Records were still buffered or in flight when a flush's deadline passed."""

    reason = "FlushTimeout"
    retriable = True
