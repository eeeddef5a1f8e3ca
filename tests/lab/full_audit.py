"""Whether this run audits everything: ``LOCKGUIDE_FULL_AUDIT=1`` (``make audit-full``).

The default suite audits the correct control locks on every row, each broken control on
its own row, and a sample of the libraries against their saved results
(``docs/libraries.results.json``). The full audit adds every row of every broken control
and every library on every row, compared with the saved results: minutes more, for a
change to the audit itself or before a release.
"""

from __future__ import annotations

import os

FULL_AUDIT_ENV = "LOCKGUIDE_FULL_AUDIT"


def full_audit() -> bool:
    return os.environ.get(FULL_AUDIT_ENV) == "1"
