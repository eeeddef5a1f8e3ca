"""``replicas=``: a grant (and an extension) counts only once that many replicas have it.

The lock sends ``WAIT replicas timeout`` after its write, on the same connection and in the
same round trip. Real servers: the session's Sentinel pair (a primary and one replica), its
Redis Cluster (a replica per master) and a lone ``redis-server`` (no replica: ``WAIT``
answers 0). fakeredis has no ``WAIT`` at all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import fakeredis
import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from lockguide import BadArgument, FencedLock, Lock, NotAcquired, NotReplicated, Watchdog, aio
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployments import (
    ClusterDeployment,
    SentinelDeployment,
    crash_before_replication,
    hold_back_replication,
    wait_until,
)

TTL_MS = 10_000
LOCKS = (Lock, FencedLock, aio.Lock, aio.FencedLock)


def master_for(sentinel: Sentinel, service: str = "mymaster", **kwargs: Any) -> redis.Redis:
    return cast(redis.Redis, sentinel.master_for(service, **kwargs))  # type: ignore[no-untyped-call]


@pytest.fixture
def sentinel(sentinel_deployment: SentinelDeployment) -> Iterator[SentinelDeployment]:
    """The Sentinel pair, ready (primary and replica in sync); healed afterwards."""
    sentinel_deployment.wait_ready()
    try:
        yield sentinel_deployment
    finally:
        sentinel_deployment.heal()


def _on_replica(deployment: SentinelDeployment, key: str) -> bool:
    with deployment.replica().admin() as admin:
        return bool(admin.exists(key))


def _waits(server: RedisServer) -> int:
    """How many ``WAIT`` commands ``server`` has run."""
    with server.admin() as admin:
        return int(admin.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


# -- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOCKS, ids=lambda k: f"{k.__module__}.{k.__name__}")
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"replicas": -1}, "replicas must be >= 0"),
        ({"replicas": 1.0}, "replicas must be an int"),
        ({"replicas": True}, "replicas must be an int"),
        ({"replicas": "1"}, "replicas must be an int"),
        ({"replicas": 1, "replicas_timeout_ms": 0}, "WAIT with a timeout of 0 would wait for ever"),
        ({"replicas": 1, "replicas_timeout_ms": 50.5}, "replicas_timeout_ms must be an int"),
        ({"replicas": 1, "replicas_timeout_ms": 1_000}, "must be below request_timeout_ms"),
        ({"replicas": 1, "request_timeout_ms": 50}, "must be below request_timeout_ms"),
        ({"replicas": 1, "replicas_timeout_ms": 300, "ttl_ms": 300}, "the lease's usable part"),
    ],
)
def test_bad_replica_options_are_refused_before_anything_is_sent(
    kind: type[Any], options: dict[str, Any], error: str
) -> None:
    server = fakeredis.FakeServer()
    client = (
        fakeredis.aioredis.FakeRedis if kind.__module__ == "lockguide.aio" else fakeredis.FakeRedis
    )(server=server)
    options = {"ttl_ms": TTL_MS, **options}
    with pytest.raises(BadArgument, match=error):
        kind(client, "lock:replicas", **options)
    assert fakeredis.FakeRedis(server=server).dbsize() == 0


# -- no replicas ------------------------------------------------------------------------


def test_without_replicas_nothing_changes_and_with_them_fakeredis_refuses_wait() -> None:
    client = fakeredis.FakeRedis()
    with Lock(client, "lock:fake", ttl_ms=TTL_MS) as lock:  # replicas=0: no WAIT is sent
        lock.extend()
    lock = Lock(client, "lock:fake", ttl_ms=TTL_MS, replicas=1)
    with pytest.raises(redis.ResponseError, match="unknown command 'wait'"):
        lock.acquire(blocking=False)  # fakeredis has no WAIT: raised at once, like an ACL's -wait
    assert not lock.held
    assert client.get("lock:fake") is None  # the grant was deleted on the way out


@pytest.mark.real_redis
def test_a_server_without_replicas_never_acknowledges(redis_server: RedisServer) -> None:
    client = redis_server.client()
    lock = Lock(client, "lock:lonely", ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=20)
    assert not lock.acquire(blocking=False)
    error = lock.last_error
    assert isinstance(error, NotReplicated)
    assert (error.acked, error.needed, error.action) == (0, 1, "acquire")
    assert client.exists("lock:lonely") == 0  # nothing left locked
    started = time.monotonic()
    with (
        pytest.raises(NotAcquired) as caught,
        Lock(
            client, "lock:lonely", ttl_ms=TTL_MS, timeout_ms=300, replicas=1, replicas_timeout_ms=20
        ),
    ):
        pass
    # The last error is the last try's: too few acknowledgements, or, on a loaded machine,
    # the deadline cutting that try's request (the acknowledgement was never awaited).
    assert isinstance(caught.value.__cause__, NotReplicated | redis.exceptions.TimeoutError)
    assert time.monotonic() - started < 1.0  # retried until the deadline, not longer
    assert client.exists("lock:lonely") == 0
    assert client.keys("{lock:lonely}:place:*") == []  # nor a place in line


@pytest.mark.real_redis
def test_the_acl_rule_needs_wait_for_replicas_and_its_absence_is_raised_at_once(
    redis_server: RedisServer,
) -> None:
    """docs/your-redis.md: ``replicas=`` adds ``+wait`` to the rule. Without it the error is
    raised at once (no retry can fix a permission), and the grant is deleted first."""
    from tests.core.test_deployments import LOCK_ACL

    user, password = "replicas-locker", "replicas-secret-1"
    page = (Path(__file__).parents[2] / "docs" / "your-redis.md").read_text("utf-8")
    assert "`replicas=`, `+wait`" in page
    with redis_server.admin() as admin:
        try:
            for rule in (LOCK_ACL, LOCK_ACL + " +wait"):
                admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}")
                admin.execute_command("ACL", "SETUSER", user, *rule.split())
                client = redis_server.client(username=user, password=password)
                lock = Lock(client, "lock:acl", ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=20)
                if "+wait" in rule:  # allowed: this lone server has no replica to acknowledge
                    assert not lock.acquire(blocking=False)
                    assert isinstance(lock.last_error, NotReplicated)
                else:
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        lock.acquire(timeout_ms=1_000)
                assert admin.exists("lock:acl") == 0
                client.close()
        finally:
            admin.acl_deluser(user)


# -- Sentinel: a primary and its replica ------------------------------------------------


@pytest.mark.real_redis
@pytest.mark.parametrize("kind", [Lock, FencedLock])
def test_a_grant_counts_once_the_replica_has_it(
    sentinel: SentinelDeployment, kind: type[Lock]
) -> None:
    lock = kind(master_for(sentinel.sentinel()), "lock:acked", ttl_ms=TTL_MS, replicas=1)
    primary = sentinel.primary()
    waits = _waits(primary)  # (a script not loaded yet is sent twice, with its WAIT)
    assert lock.acquire(blocking=False)
    assert _waits(primary) > waits  # in the grant's round trip
    assert _on_replica(sentinel, "lock:acked")  # acknowledged: the replica has it already
    waits = _waits(primary)
    lock.extend()
    assert _waits(primary) > waits
    waits = _waits(primary)
    lock.release()
    assert _waits(primary) == waits  # a release waits for nobody


@pytest.mark.real_redis
def test_a_waiter_handed_the_key_waits_for_the_replica_before_it_holds(
    sentinel: SentinelDeployment,
) -> None:
    client = master_for(sentinel.sentinel())
    primary = sentinel.primary()
    holder = Lock(client, "lock:handed", ttl_ms=TTL_MS, owner="process")
    waiter = Lock(
        client,
        "lock:handed",
        ttl_ms=TTL_MS,
        replicas=1,
        retry_delay_ms=(3_000, 3_000),
        owner="process",
    )
    assert holder.acquire()
    held: list[bool] = []
    thread = threading.Thread(target=lambda: held.append(waiter.acquire(timeout_ms=6_000)))
    thread.start()
    with primary.admin() as admin:
        wait_until(lambda: any(c["cmd"] == "blpop" for c in admin.client_list()), "in line", 5)
    waits = _waits(primary)
    holder.release()  # hands the key to the waiter, which must not count it yet
    thread.join(5)
    assert held == [True]
    assert _waits(primary) > waits, "the woken waiter's grant was never acknowledged"
    assert _on_replica(sentinel, "lock:handed")
    waiter.release()


@pytest.mark.real_redis
def test_with_the_replica_cut_off_the_grant_is_deleted_and_the_try_fails(
    sentinel: SentinelDeployment,
) -> None:
    primary, replica = sentinel.primary(), sentinel.replica()
    client = master_for(sentinel.sentinel())
    lock = Lock(client, "lock:cut", ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=50)
    hold_back_replication(primary, replica)
    assert not lock.acquire(blocking=False)
    assert isinstance(lock.last_error, NotReplicated)
    assert lock.last_error.acked == 0
    assert not lock.held
    with primary.admin() as admin:
        assert admin.exists("lock:cut") == 0  # nothing left locked


@pytest.mark.real_redis
def test_a_blocking_acquire_retries_until_the_paused_replica_catches_up(
    sentinel: SentinelDeployment,
) -> None:
    replica = sentinel.replica()
    lock = Lock(master_for(sentinel.sentinel()), "lock:paused", ttl_ms=TTL_MS, replicas=1)
    replica.freeze()  # the link stays up; the replica answers nothing for a second
    threading.Timer(1.0, replica.thaw).start()
    started = time.monotonic()
    assert lock.acquire(timeout_ms=5_000)
    assert time.monotonic() - started >= 0.9
    assert isinstance(lock.last_error, NotReplicated)  # the tries before were refused
    assert _on_replica(sentinel, "lock:paused")
    lock.release()


@pytest.mark.real_redis
def test_an_extension_the_replica_lacks_keeps_the_old_deadline(
    sentinel: SentinelDeployment,
) -> None:
    primary, replica = sentinel.primary(), sentinel.replica()
    lock = Lock(
        master_for(sentinel.sentinel()), "lock:ext", ttl_ms=TTL_MS, replicas=1,
        replicas_timeout_ms=50,
    )  # fmt: skip
    assert lock.acquire(blocking=False)
    time.sleep(0.2)
    before = lock.validity_remaining_ms()
    hold_back_replication(primary, replica)
    with pytest.raises(NotReplicated) as caught:
        lock.extend()
    assert caught.value.action == "extend"
    assert lock.held
    assert lock.validity_remaining_ms() <= before  # not lengthened
    replica.thaw()


@pytest.mark.real_redis
def test_the_watchdog_treats_an_unacknowledged_renewal_as_a_failed_one(
    sentinel: SentinelDeployment,
) -> None:
    primary, replica = sentinel.primary(), sentinel.replica()
    lock = Lock(
        master_for(sentinel.sentinel()), "lock:dog", ttl_ms=1_500, replicas=1,
        replicas_timeout_ms=50,
    )  # fmt: skip
    assert lock.acquire(blocking=False)
    hold_back_replication(primary, replica)
    lost = threading.Event()
    dog = Watchdog(lock, every_ms=300, on_lost=lambda _: lost.set())
    dog.start()
    assert lost.wait(5.0)  # renewals kept failing: the lease ran out on the old deadline
    assert isinstance(dog.error.__cause__ if dog.error else None, NotReplicated)
    dog.stop()
    replica.thaw()


@pytest.mark.real_redis
def test_asyncio_locks_wait_for_the_replica_too(sentinel: SentinelDeployment) -> None:
    primary, replica = sentinel.primary(), sentinel.replica()
    host, port = primary.address

    async def main() -> tuple[bool, bool, object]:
        client = redis.asyncio.Redis(host=host, port=port)
        lock = aio.FencedLock(client, "lock:aio", ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=50)
        first = await lock.acquire(blocking=False)
        await lock.extend()
        await lock.release()
        hold_back_replication(primary, replica)
        second = await lock.acquire(blocking=False)
        await client.aclose()
        return first, second, lock.last_error

    first, second, error = asyncio.run(main())
    assert first
    assert not second
    assert isinstance(error, NotReplicated)
    with primary.admin() as admin:
        assert admin.exists("lock:aio") == 0


# -- Redis Cluster --------------------------------------------------------------------


def _synced_pair(cluster: ClusterDeployment, key: str) -> tuple[RedisServer, RedisServer]:
    """The master of ``key``'s slot and its replica, once the replica has every write (a
    node restarted by another test's heal may still be syncing)."""
    cluster.wait_ready()
    master = cluster.master_of(key)
    tag = key.partition("{")[2].partition("}")[0]

    def synced() -> bool:
        with master.admin() as admin, admin.pipeline(transaction=False) as pipe:
            pipe.set(f"{{{tag}}}:sync", 1)
            pipe.wait(1, 500)
            return int(pipe.execute()[1]) >= 1

    wait_until(synced, "the replica to sync")
    return master, cluster.replica_of(master)


@pytest.mark.real_redis
def test_on_a_cluster_the_slots_master_waits_for_its_replica(
    redis_cluster: ClusterDeployment,
) -> None:
    cluster = redis_cluster
    key = "lock:{acked}"
    master, replica = _synced_pair(cluster, key)
    lock = Lock(cluster.client(), key, ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=50)
    assert lock.acquire(blocking=False)
    lock.release()
    try:
        hold_back_replication(master, replica)
        assert not lock.acquire(blocking=False)
        assert isinstance(lock.last_error, NotReplicated)
        with master.admin() as admin:
            assert admin.exists(key) == 0
    finally:
        cluster.heal()


@pytest.mark.real_redis
def test_with_replicas_a_failover_does_not_grant_the_lock_twice(
    redis_cluster: ClusterDeployment,
) -> None:
    """The failover of tests/core/test_deployments.py that gives a plain Lock twice: with
    ``replicas=1`` A is never told it holds a key the promoted replica lacks. (On the
    Cluster: the Sentinel pair's failover is the same, and its heal slower.)"""
    cluster = redis_cluster
    key = "lock:{twice}"
    master, replica = _synced_pair(cluster, key)
    try:
        a = Lock(cluster.client(), key, ttl_ms=TTL_MS, replicas=1, replicas_timeout_ms=50)
        hold_back_replication(master, replica)
        assert not a.acquire(blocking=False)
        crash_before_replication(master, replica)
        cluster.wait_for_promotion(replica)
        b_client = RedisCluster(host=replica.host, port=replica.port, socket_timeout=5)
        b = Lock(b_client, key, ttl_ms=TTL_MS)  # replicas=0: the new master has none yet
        assert b.acquire(blocking=False)
        assert not a.held
        b.release()
    finally:
        cluster.heal()
