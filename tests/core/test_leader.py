"""``Leader`` and ``aio.Leader``: one leader at a time for a role, over Redis and over etcd.

Over Redis each test runs on fakeredis and on the session's redis-server (the ``backend``
fixture); the Sentinel failovers run on the session's Sentinel deployment, the etcd tests on
its three-member cluster (they skip locally when etcd is absent). Timings are short: a lease
of about a second, so a test waits a few retry periods at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
import urllib3
from redis.sentinel import Sentinel

from lockguide import (
    BadArgument,
    BadArgumentType,
    ClusterUnavailable,
    Leader,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    Term,
    aio,
)
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.consensus import EtcdCluster
from lockguide_lab.testbed.deployments import (
    SentinelDeployment,
    crash_before_replication,
    hold_back_replication,
)
from tests.support import Backend, fake_backend, real_backend

_names = itertools.count()
REDIS_TIMING: dict[str, Any] = {"lease_ms": 1000, "renew_deadline_ms": 600, "retry_period_ms": 150}
ETCD_TIMING: dict[str, Any] = {"lease_ms": 2000, "renew_deadline_ms": 1200, "retry_period_ms": 300}
Make = Callable[..., Any]


def _role() -> str:
    return f"lock:leader:{next(_names)}-{time.monotonic_ns()}"


def wait_until(condition: Callable[[], object], ceiling_s: float = 5.0) -> bool:
    deadline = time.monotonic() + ceiling_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(
    params=[
        "fakeredis",
        pytest.param("redis-server", marks=pytest.mark.real_redis),
        pytest.param("etcd", marks=pytest.mark.consensus),
    ]
)
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """Contenders for one fresh role: over fakeredis, the session's redis-server, or etcd."""
    role = _role()
    if request.param == "etcd":
        cluster: EtcdCluster = request.getfixturevalue("etcd_cluster")

        def on_etcd(**options: Any) -> Leader:
            return Leader(cluster.endpoints, role, **{**ETCD_TIMING, **options})

        yield on_etcd
        return
    backend = fake_backend()
    if request.param == "redis-server":
        server: RedisServer = request.getfixturevalue("redis_server")
        backend = real_backend(server, request.getfixturevalue("redis_masters"))
    clients: list[redis.Redis] = []

    def on_redis(**options: Any) -> Leader:
        clients.append(backend.client())
        return Leader(clients[-1], role, **{**REDIS_TIMING, **options})

    yield on_redis
    for client in clients:
        client.close()


def _resign_quietly(leader: Leader) -> None:
    with contextlib.suppress(NotOwned, RenewalFailed):
        leader.resign()


# -- one leader at a time ---------------------------------------------------------------


def test_one_leader_at_a_time_among_contending_threads(make: Make) -> None:
    """Four threads campaign for short terms; the terms never overlap, tokens only go up."""
    terms: list[tuple[float, float, int, str]] = []
    guard = threading.Lock()
    failures: list[BaseException] = []

    def contend(name: str) -> None:
        leader = make(name=name)
        try:
            for _ in range(3):
                assert leader.campaign(timeout_ms=15_000)
                began = time.monotonic()
                time.sleep(0.03)
                leader.check()
                with guard:
                    terms.append((began, time.monotonic(), leader.token, name))
                leader.resign()
        except BaseException as error:  # the test reports it
            failures.append(error)

    threads = [threading.Thread(target=contend, args=(f"c{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert len(terms) == 12
    terms.sort()
    for (_, ended, token, _), (began, _, next_token, _) in itertools.pairwise(terms):
        assert ended <= began, "two leaders at once"
        assert next_token > token, "the token went back"


def test_a_second_contender_is_refused_while_one_leads(make: Make) -> None:
    a, b = make(name="a"), make(name="b", timeout_ms=300)
    with a:
        assert a.leading
        assert not b.campaign(blocking=False)
        started = time.monotonic()
        with pytest.raises(NotAcquired):
            b.__enter__()
        assert time.monotonic() - started < 0.3 + 0.5
        time.sleep(a.lease_ms * 1.5 / 1000)  # past a lease: a renews it
        assert a.leading
        a.check()
    assert not a.leading
    assert b.campaign(blocking=False)
    b.resign()


def test_resign_hands_leadership_to_a_waiting_contender_quickly(make: Make) -> None:
    """The waiter is elected at once (Redis hands it the key; etcd: its next try), not
    after the lease: resigning frees the role."""
    a, b = make(name="a"), make(name="b")
    assert a.campaign()
    elected: list[bool] = []
    waiter = threading.Thread(target=lambda: elected.append(b.campaign(timeout_ms=10_000)))
    waiter.start()
    time.sleep(0.3)  # b is waiting
    resigned = time.monotonic()
    a.resign()
    waiter.join(10)
    took = time.monotonic() - resigned
    assert elected == [True], "b was not elected"
    assert took < b.retry_period_ms / 1000 + 0.2, f"{took:.3f} s after the resign"
    assert took < b.lease_ms / 1000 / 2
    b.resign()


def test_the_token_increases_across_terms_and_readers_see_it(make: Make) -> None:
    a, b, reader = make(name="a"), make(name="b"), make(name="reader")
    assert reader.holder() is None
    tokens = []
    for leader in (a, b, a, b):
        before = time.time()
        assert leader.campaign(timeout_ms=5_000)
        term = reader.holder()
        assert isinstance(term, Term)
        assert term.token == leader.token
        assert term.name.endswith(f":{'a' if leader is a else 'b'}")
        assert term.since is not None
        assert before - 1 <= term.since.timestamp() <= time.time() + 0.01
        assert 0 < term.ttl_ms <= leader.lease_ms
        tokens.append(leader.token)
        leader.resign()
    assert tokens == sorted(set(tokens)), tokens
    assert reader.holder() is None
    with pytest.raises(NotOwned):
        _ = reader.token
    with pytest.raises(NotOwned):
        reader.resign()


def test_a_leader_whose_role_expired_and_was_taken_stops(make: Make, request: Any) -> None:
    """The role's key expires under the leader (here: made to) and a contender takes it: the
    old leader's next renewal finds it someone else's, within a retry period."""
    lost: list[RenewalFailed] = []
    a = make(name="a", on_lost=lost.append)
    b = make(name="b")
    assert a.campaign()
    first = a.token
    _expire(a)
    assert b.campaign(timeout_ms=10_000)
    taken = time.monotonic()
    assert a.lost_event.wait(5)
    assert time.monotonic() - taken < a.retry_period_ms / 1000 + 0.5
    assert len(lost) == 1
    assert isinstance(lost[0], RenewalFailed)
    assert not a.leading
    with pytest.raises(RenewalFailed):
        a.check()
    assert b.token > first
    with pytest.raises(RenewalFailed):
        a.resign()
    assert b.holder() is not None
    assert b.holder().token == b.token
    b.resign()


def _expire(leader: Leader) -> None:
    """End the leader's lease on the server, as its expiry would."""
    lock: Any = leader._lock
    if leader._etcd:
        urllib3.request("POST", lock._endpoints[0] + "/v3/lease/revoke", json={"ID": lock.lease_id})
    else:
        assert lock._client.pexpire(leader.role, 1)
        time.sleep(0.01)


def test_a_lost_leader_campaigns_again_for_a_new_term(make: Make) -> None:
    a = make(name="a")
    assert a.campaign()
    old = a.token
    _expire(a)
    assert a.lost_event.wait(5)
    assert a.campaign(timeout_ms=10_000)
    assert a.leading
    assert not a.lost_event.is_set()
    assert a.token > old
    a.resign()


# -- the timing rule, checked before anything is sent -----------------------------------


@pytest.mark.parametrize(
    ("timing", "error", "says"),
    [
        ({"lease_ms": 10_000, "renew_deadline_ms": 10_000}, BadArgument, "greater than renew"),
        ({"lease_ms": 5_000}, BadArgument, "lease_ms \\(5000\\) must be greater"),
        ({"retry_period_ms": 9_000}, BadArgument, "1.2 x retry_period_ms"),
        ({"renew_deadline_ms": 2_400, "retry_period_ms": 2_000}, BadArgument, "1.2"),
        ({"retry_period_ms": 0}, BadArgument, "retry_period_ms"),
        ({"lease_ms": -1}, BadArgument, "lease_ms"),
        ({"lease_ms": 15.5}, BadArgumentType, "lease_ms"),
        ({"renew_deadline_ms": "10s"}, BadArgumentType, "renew_deadline_ms"),
        ({"lock_delay_ms": 5_000}, BadArgument, "consensus"),
        ({"name": "two words"}, BadArgument, "spaces"),
        ({"on_lost": 3}, BadArgumentType, "on_lost"),
    ],
)
def test_timing_rule_violations_raise_before_any_request(
    timing: dict[str, Any], error: type[Exception], says: str
) -> None:
    nowhere = redis.Redis(port=1)  # any request would fail with ConnectionError
    with pytest.raises(error, match=says):
        Leader(nowhere, "lock:leader:x", **timing)
    if "lock_delay_ms" not in timing:
        with pytest.raises(error, match=says):
            Leader("http://127.0.0.1:1", "lock:leader:x", **timing)


def test_client_go_defaults_and_etcd_whole_seconds() -> None:
    leader = Leader(redis.Redis(port=1), "lock:leader:x")
    assert (leader.lease_ms, leader.renew_deadline_ms, leader.retry_period_ms) == (
        15_000,
        10_000,
        2_000,
    )
    with pytest.raises(BadArgument, match="whole number of seconds"):
        Leader("http://127.0.0.1:1", "lock:leader:x", lease_ms=15_500)
    with pytest.raises(BadArgument, match="at most 60000"):
        Leader("http://127.0.0.1:1", "lock:leader:x", lock_delay_ms=61_000)
    with pytest.raises(BadArgumentType):
        Leader(object(), "lock:leader:x")  # type: ignore[arg-type]


def test_reading_who_leads_from_an_etcd_that_does_not_answer_is_a_typed_error() -> None:
    reader = Leader("http://127.0.0.1:1", "lock:leader:x", request_timeout_ms=100)
    with pytest.raises(ClusterUnavailable):
        reader.holder()


# -- a paused leader, a leader cut off from Redis ----------------------------------------

PAUSED_LEADER = """
import sys, time, redis
from lockguide import Leader, RenewalFailed
port, role = int(sys.argv[1]), sys.argv[2]
r = redis.Redis(port=port)
lost = []
leader = Leader(r, role, name="paused", on_lost=lost.append,
                lease_ms=1000, renew_deadline_ms=600, retry_period_ms=150)
assert leader.campaign()
print("elected", leader.token, flush=True)
try:
    while True:
        leader.check()
        r.rpush(role + ":work", leader.token)
        time.sleep(0.01)
except RenewalFailed:
    print("stopped", leader.lost_event.wait(2), len(lost), flush=True)
"""


@pytest.mark.real_redis
def test_a_paused_leader_stops_its_work_as_soon_as_it_resumes(redis_server: RedisServer) -> None:
    """The leader's whole process is stopped (SIGSTOP) past its lease; another is elected.
    Resumed, its next check() refuses: at most one step (paused between check and write,
    which only a fencing token can refuse) lands after the new leader's election."""
    role, client = _role(), redis_server.client()
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED_LEADER, str(redis_server.port), role],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("elected")
        time.sleep(0.1)
        child.send_signal(signal.SIGSTOP)
        steps_before = client.llen(role + ":work")
        b = Leader(client, role, name="b", **REDIS_TIMING)
        assert b.campaign(timeout_ms=5_000)  # after the paused leader's lease
        child.send_signal(signal.SIGCONT)
        assert child.wait(5) == 0
        assert child.stdout.readline().split() == ["stopped", "True", "1"]
        assert client.llen(role + ":work") - steps_before <= 1
        b.check()
        b.resign()
    finally:
        child.kill()
        client.close()


@pytest.mark.real_redis
def test_a_leader_cut_off_stops_at_the_renew_deadline_before_the_lease_ends(
    redis_server: RedisServer,
) -> None:
    """Redis frozen: no renewal is answered. The leader stops when the renew deadline has
    passed since its last renewal, a margin (lease - renew deadline) before Redis frees the
    role; a contender cannot have it before then."""
    client = redis_server.client()
    lost_at: list[float] = []
    a = Leader(
        client,
        _role(),
        **REDIS_TIMING,
        request_timeout_ms=100,
        on_lost=lambda error: lost_at.append(time.monotonic()),
    )
    assert a.campaign()
    time.sleep(0.2)
    with redis_server.frozen():
        frozen = time.monotonic()
        assert a.lost_event.wait(3)
    renew_s, lease_s = a.renew_deadline_ms / 1000, a.lease_ms / 1000
    since = lost_at[0] - frozen
    assert renew_s - a.retry_period_ms / 1000 - 0.05 <= since <= renew_s + 0.1, since
    assert since < lease_s - 0.2, "stopped before the lease could end on the server"
    with pytest.raises(RenewalFailed, match="no renewal was answered"):
        a.check()
    _resign_quietly(a)
    client.close()


# -- asyncio ------------------------------------------------------------------------------


def test_asyncio_a_lost_term_cancels_the_body(backend: Backend) -> None:
    async def main() -> None:
        client = backend.async_client()
        role = _role()
        a = aio.Leader(client, role, name="a", **REDIS_TIMING)
        b = aio.Leader(client, role, name="b", **REDIS_TIMING)
        reached_the_end = False
        started = 0.0

        async def lead() -> None:
            nonlocal reached_the_end, started
            async with a:
                assert a.leading
                assert a.token >= 1
                term = await b.holder()
                assert term is not None
                assert term.name.endswith(":a")
                await client.pexpire(role, 1)
                await asyncio.sleep(0.01)
                assert await b.campaign(timeout_ms=5_000)
                started = time.monotonic()
                await asyncio.sleep(5)
                reached_the_end = True

        with pytest.raises(RenewalFailed):
            await lead()
        assert not reached_the_end
        assert time.monotonic() - started < a.retry_period_ms / 1000 + 0.5
        assert a.lost_event.is_set()
        await b.resign()
        assert await b.holder() is None
        await client.aclose()

    asyncio.run(main())


def test_asyncio_resign_and_an_outside_cancellation(backend: Backend) -> None:
    async def main() -> None:
        client = backend.async_client()
        role = _role()
        a = aio.Leader(client, role, **REDIS_TIMING)
        assert await a.campaign()
        assert not await aio.Leader(client, role, **REDIS_TIMING).campaign(blocking=False)
        await asyncio.sleep(1.2)  # past the lease: renewed
        a.check()
        await a.resign()

        async def lead() -> None:
            async with a:
                await asyncio.sleep(5)

        task = asyncio.ensure_future(lead())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # a cancellation from outside stays one
        assert await a.holder() is None  # and the role was given up
        await client.aclose()

    asyncio.run(main())


# -- Sentinel: an efficiency leader ------------------------------------------------------


def master_for(sentinel: Sentinel) -> redis.Redis:
    return cast(redis.Redis, sentinel.master_for("mymaster"))  # type: ignore[no-untyped-call]


@pytest.mark.real_redis
def test_leadership_follows_a_sentinel_failover(sentinel_deployment: SentinelDeployment) -> None:
    """A graceful failover: the role's key is on the new primary, and the leader leads on."""
    deployment = sentinel_deployment
    deployment.wait_ready()
    role = _role()
    timing: dict[str, Any] = {"lease_ms": 6000, "renew_deadline_ms": 4000, "retry_period_ms": 300}
    a = Leader(master_for(deployment.sentinel()), role, name="a", **timing)
    b = Leader(master_for(deployment.sentinel()), role, name="b", **timing)
    assert a.campaign()
    token = a.token
    try:
        old = deployment.primary()
        new = deployment.fail_over()
        assert new is not old
        renewals = a._dog._renewals  # type: ignore[union-attr]
        assert wait_until(lambda: a._dog._renewals > renewals, 5)  # type: ignore[union-attr]
        assert a.leading
        assert not a.lost_event.is_set()
        assert not b.campaign(blocking=False)
        term = b.holder()
        assert term is not None
        assert term.name.endswith(":a")
        assert term.token == token
        a.resign()
        assert b.campaign(blocking=False)
        b.resign()
    finally:
        deployment.heal()


@pytest.mark.real_redis
def test_a_failover_that_loses_the_role_elects_a_second_leader_until_the_first_renews(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """The efficiency leader's accepted overlap: the promoted replica never had the role's key,
    so B is elected while A still leads; A's next renewal finds the key B's and A stops."""
    deployment = sentinel_deployment
    deployment.wait_ready()
    role = _role()
    timing: dict[str, Any] = {"lease_ms": 6000, "renew_deadline_ms": 4000, "retry_period_ms": 300}
    primary, replica = deployment.primary(), deployment.replica()
    a = Leader(master_for(deployment.sentinel()), role, name="a", **timing)
    try:
        hold_back_replication(primary, replica)
        assert a.campaign()
        a_token = a.token
        crash_before_replication(primary, replica)
        deployment.wait_for_new_primary(primary)
        b = Leader(master_for(deployment.sentinel()), role, name="b", **timing)
        assert b.campaign(timeout_ms=5_000)
        elected = time.monotonic()
        assert a.lost_event.wait(5), "A never learnt it was deposed"
        overlap = time.monotonic() - elected
        assert overlap < timing["retry_period_ms"] / 1000 + 1.0, f"{overlap:.3f} s of two leaders"
        assert b.token == a_token, "the counter's increment was lost with the key: fence elsewhere"
        b.resign()
    finally:
        deployment.heal()


# -- etcd: a correctness leader ------------------------------------------------------------


@pytest.mark.consensus
def test_killing_the_etcd_leader_member_does_not_make_two_leaders(
    etcd_cluster: EtcdCluster,
) -> None:
    role = _role()
    a = Leader(etcd_cluster.endpoints, role, name="a", **ETCD_TIMING, request_timeout_ms=300)
    b = Leader(etcd_cluster.endpoints, role, name="b", **ETCD_TIMING, request_timeout_ms=300)
    assert a.campaign()
    both: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            if a.leading and b.leading:
                both.append(time.monotonic())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    waiter = threading.Thread(target=lambda: b.campaign(timeout_ms=8_000))
    waiter.start()
    killed = etcd_cluster.leader()
    try:
        etcd_cluster.kill(killed)
        time.sleep(3 * ETCD_TIMING["lease_ms"] / 1000)
        assert etcd_cluster.leader() != killed
        leaders = [x for x in (a, b) if x.leading]
        assert len(leaders) == 1, "one leader after the election, not none or two"
        term = a.holder()
        assert term is not None
        assert term.token == leaders[0].token
    finally:
        done.set()
        sampler.join()
        waiter.join(10)
        etcd_cluster.restart(killed)
        for leader in (a, b):
            _resign_quietly(leader)
    assert not both, "two leaders at once"


@pytest.mark.consensus
def test_etcd_lock_delay_applies_after_a_crashed_leader_not_after_resign(
    etcd_cluster: EtcdCluster,
) -> None:
    role, delay_ms = _role(), 2000
    a = Leader(etcd_cluster.endpoints, role, name="a", **ETCD_TIMING, lock_delay_ms=delay_ms)
    b = Leader(etcd_cluster.endpoints, role, name="b", **ETCD_TIMING, lock_delay_ms=delay_ms)
    assert a.campaign()
    a.resign()
    started = time.monotonic()
    assert b.campaign(timeout_ms=5_000)
    assert time.monotonic() - started < 0.5, "a clean resign costs nothing"
    _expire(b)  # b's lease ends without a release, as when its process dies
    lost_at = time.monotonic()
    assert a.campaign(timeout_ms=delay_ms + 5_000)
    waited = time.monotonic() - lost_at
    assert delay_ms / 1000 <= waited < delay_ms / 1000 + 1.5, f"elected after {waited:.3f} s"
    assert b.lost_event.wait(2)
    a.resign()


@pytest.mark.consensus
def test_etcd_asyncio_leader_is_cancelled_on_loss_and_reads_the_term(
    etcd_cluster: EtcdCluster,
) -> None:
    async def main() -> None:
        role = _role()
        a = aio.Leader(etcd_cluster.endpoints, role, name="a", **ETCD_TIMING)
        b = aio.Leader(etcd_cluster.endpoints, role, name="b", **ETCD_TIMING)
        reached_the_end = False
        term: Term | None = None

        async def lead() -> None:
            nonlocal reached_the_end, term
            async with a:
                term = await b.holder()
                assert term is not None
                assert term.token == a.token
                assert term.name.endswith(":a")
                assert not await b.campaign(blocking=False)
                _expire(cast(Leader, a))
                await asyncio.sleep(5)
                reached_the_end = True

        with pytest.raises(RenewalFailed):
            await lead()
        assert not reached_the_end
        assert await b.campaign(timeout_ms=5_000)
        assert b.token > (term.token if term else 0)
        await b.resign()
        assert await a.holder() is None

    asyncio.run(main())
