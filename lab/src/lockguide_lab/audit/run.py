"""Run the checklist against one lock and build its :class:`Report`."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal

from lockguide_lab.audit.adapter import AdapterFactory, Server, Unsupported
from lockguide_lab.audit.checks import CHECKS, run_check
from lockguide_lab.audit.report import Report, Row, Status
from lockguide_lab.audit.servers import fake_servers, real_servers
from lockguide_lab.audit.session import AuditSession, resolve_factory

__all__ = ["BUILTIN", "audit", "audit_all", "audit_on", "resolve"]

#: The adapters that ship with the audit, by short name.
BUILTIN: dict[str, str] = {
    "lockguide": "lockguide_lab.audit.adapters.lockguide_lock:adapter",
    "lockguide-redlock": "lockguide_lab.audit.adapters.lockguide_redlock:adapter",
    "lockguide-fenced": "lockguide_lab.audit.adapters.lockguide_fenced:adapter",
    "redis-py": "lockguide_lab.audit.adapters.redis_py:adapter",
    "redis-py-asyncio": "lockguide_lab.audit.adapters.redis_py_asyncio:adapter",
    "pottery": "lockguide_lab.audit.adapters.pottery_redlock:adapter",
    "python-redis-lock": "lockguide_lab.audit.adapters.python_redis_lock:adapter",
    "redlock-py": "lockguide_lab.audit.adapters.redlock_py:adapter",
    "redlock": "lockguide_lab.audit.adapters.redlock_glasslion:adapter",
    "aioredlock": "lockguide_lab.audit.adapters.aioredlock_redlock:adapter",
    "redlock-ng": "lockguide_lab.audit.adapters.redlock_ng:adapter",
    "redlock-ng-asyncio": "lockguide_lab.audit.adapters.redlock_ng:async_adapter",
    "tooz": "lockguide_lab.audit.adapters.tooz_redis:adapter",
    "sherlock": "lockguide_lab.audit.adapters.sherlock_redis:adapter",
    "portalocker": "lockguide_lab.audit.adapters.portalocker_redis:adapter",
    "broken": "lockguide_lab.audit.adapters.broken:adapter",
}

Backend = Literal["real", "fake"]


def resolve(target: str | AdapterFactory) -> tuple[AdapterFactory, str | None]:
    """A factory and its ``MODULE:FACTORY`` name (``None`` if it has no importable name)."""
    if isinstance(target, str):
        named = BUILTIN.get(target, target)
        return resolve_factory(named), named
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    spec = f"{module}:{qualname}" if module and qualname else None
    if spec is not None and module != "__main__":
        with contextlib.suppress(Exception):
            if resolve_factory(spec) is target:
                return target, spec
    return target, None


def audit_on(
    target: str | AdapterFactory,
    servers: Sequence[Server],
    *,
    backend: str,
    checks: Iterable[str] | None = None,
    done: Mapping[str, Row] | None = None,
) -> Report:
    """Audit one lock on servers that are already running.

    The audit empties the servers (``FLUSHALL``) before and between checks:
    never point it at a server whose data you need. ``done`` holds rows already run on
    this lock (by :func:`audit_all`); they are taken as they are, in the checklist's order.
    """
    wanted = set(checks) if checks is not None else None
    factory, spec = resolve(target)
    session = AuditSession(factory, servers, factory_spec=spec)
    try:
        session.flush()
        try:
            probe = session.adapter()
        except Unsupported:
            raise
        except Exception as error:  # the library cannot even start here: say so, every row
            return _cannot_run(spec or repr(target), error, backend, len(servers), wanted)
        name, version = probe.name, probe.version
        multi = probe.multi_master
        session.cleanup()
        rows: list[Row] = []
        for check in CHECKS:
            if wanted is not None and check.id not in wanted:
                continue
            if check.redlock_only and not multi:
                rows.append(
                    Row(
                        check.id,
                        check.title,
                        check.must,
                        Status.NA,
                        "single instance: applies to Redlock-style locks only",
                    )
                )
                continue
            if done is not None and check.id in done:
                rows.append(done[check.id])
                continue
            rows.append(run_check(session, check.id))
    finally:
        session.close()
    return Report(
        adapter=spec or repr(target),
        name=name,
        version=version,
        backend=backend,
        masters=len(servers) if multi else 1,
        multi_master=multi,
        rows=rows,
    )


#: The rows :func:`audit_all` runs for every lock at once: each only waits (a contended
#: acquire left to its own deadline), on keys of its own, and cleans up nothing until all
#: are done.
AT_ONCE = ("wait",)


def audit_all(
    targets: Sequence[str | AdapterFactory],
    servers: Sequence[Server],
    *,
    backend: str,
    checks: Iterable[str] | None = None,
) -> list[Report]:
    """Audit several locks on servers that are already running, one report each.

    The same reports as :func:`audit_on` for each target in turn, sooner: the rows in
    :data:`AT_ONCE` (long waits that load nothing) run for all the locks together first,
    each lock in its own thread on keys of its own, then the other rows run one lock
    after another.
    """
    wanted = set(checks) if checks is not None else None
    early = [c for c in AT_ONCE if wanted is None or c in wanted]
    done = _at_once(targets, servers, early) if early else [{} for _ in targets]
    return [
        audit_on(target, servers, backend=backend, checks=checks, done=rows)
        for target, rows in zip(targets, done, strict=True)
    ]


def _at_once(
    targets: Sequence[str | AdapterFactory], servers: Sequence[Server], check_ids: Sequence[str]
) -> list[dict[str, Row]]:
    """Run ``check_ids`` for every target at the same time; a target whose adapter cannot
    be made here gets no rows (:func:`audit_on` then runs or reports them itself)."""
    done: list[dict[str, Row]] = [{} for _ in targets]
    if not targets:
        return done
    sessions: list[AuditSession] = []
    for target in targets:
        factory, spec = resolve(target)
        session = AuditSession(factory, servers, factory_spec=spec, namespace=f":{len(sessions)}")
        session.flushes = False  # the others' locks are held on the same servers
        sessions.append(session)
    sessions[0].flush()

    def run_rows(i: int) -> None:
        session = sessions[i]
        try:
            session.adapter()  # the probe audit_on makes: a lock that cannot start is left
        except Exception:
            return
        finally:
            session.cleanup()
        for check_id in check_ids:
            done[i][check_id] = run_check(session, check_id)

    threads = [
        threading.Thread(target=run_rows, args=(i,), daemon=True) for i in range(len(targets))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for session in sessions:
            session.close()
        sessions[0].flush()
    return done


def _cannot_run(
    adapter: str, error: Exception, backend: str, masters: int, wanted: set[str] | None
) -> Report:
    """The report of a lock whose adapter could not be made: every row an error that
    names what was raised (an import that fails on this Python, a missing dependency)."""
    python = ".".join(str(n) for n in sys.version_info[:2])
    said = f"cannot run on Python {python}: making it raised {type(error).__name__}: {error}"
    rows = [
        Row(check.id, check.title, check.must, Status.ERROR, said)
        for check in CHECKS
        if wanted is None or check.id in wanted
    ]
    module = adapter.partition(":")[0]
    return Report(adapter, module, "?", backend, masters, False, rows)


@contextlib.contextmanager
def started(backend: Backend, masters: int) -> Iterator[list[Server]]:
    """Servers for an audit: real ``redis-server`` processes or fakeredis."""
    if backend == "real":
        with real_servers(masters) as servers:
            yield servers
    elif backend == "fake":
        yield fake_servers(masters)
    else:
        raise ValueError(f"backend must be 'real' or 'fake', not {backend!r}")


def audit(
    target: str | AdapterFactory,
    *,
    backend: Backend = "real",
    masters: int = 5,
    checks: Iterable[str] | None = None,
) -> Report:
    """Start servers, audit one lock on them, stop them, return the report.

    Args:
        target: ``"MODULE:FACTORY"``, a built-in name (see :data:`BUILTIN`), or
            the factory itself.
        backend: ``"real"`` starts ``masters`` redis-server processes on free
            loopback ports; ``"fake"`` uses fakeredis, where the rows that need
            a link or a second process are reported as not run.
        masters: how many independent servers (a Redlock uses them all).
        checks: only these check ids (default: the whole checklist).
    """
    label = "redis-server" if backend == "real" else "fakeredis"
    with started(backend, masters) as servers:
        return audit_on(target, servers, backend=label, checks=checks)
