"""Audit a Redis lock against the guide's checklist by running it.

Every row of the report is the outcome of a run against real (or fake) Redis
servers that the audit starts itself: it acquires, pauses, expires, sabotages
and retries the lock through a small adapter, and watches what the servers
hold. Nothing is read from a README.

Command line (the console script the lab installs; ``python -m lockguide_lab.audit`` too)::

    lockguide-audit MODULE:FACTORY [--backend real|fake] [--json]
    lockguide-audit --list

Python::

    from lockguide_lab.audit import audit
    report = audit("mypackage.locks:audit_adapter", backend="real")
    print(report.text())
    raise SystemExit(report.exit_code)

See :mod:`lockguide_lab.audit.adapter` for what a factory returns.
"""

from lockguide_lab.audit.adapter import (
    DEFAULT,
    NO_EXPIRY,
    Adapter,
    AdapterFactory,
    Holder,
    Server,
    TtlSpec,
    Unsupported,
)
from lockguide_lab.audit.checks import CHECKS
from lockguide_lab.audit.report import Check, Control, Report, Row, Status
from lockguide_lab.audit.run import BUILTIN, audit, audit_all, audit_on

__all__ = [
    "BUILTIN",
    "CHECKS",
    "DEFAULT",
    "NO_EXPIRY",
    "Adapter",
    "AdapterFactory",
    "Check",
    "Control",
    "Holder",
    "Report",
    "Row",
    "Server",
    "Status",
    "TtlSpec",
    "Unsupported",
    "audit",
    "audit_all",
    "audit_on",
]
