"""Testbeds whose failover is a real deployment's: Sentinel's, or a Redis Cluster's.

:class:`DeploymentTestbed` is a :class:`~lockguide_lab.testbed.real.RealTestbed`
whose :meth:`~DeploymentTestbed.failover_pair` is not the lab's relay model (a
replica promoted by ``REPLICAOF NO ONE`` behind a link that moves) but a
:class:`~lockguide_lab.testbed.deployments.SentinelDeployment` or a
:class:`~lockguide_lab.testbed.deployments.ClusterDeployment`: the clients are
``Sentinel.master_for`` or ``RedisCluster`` clients, the replica falls behind
by :func:`~lockguide_lab.testbed.deployments.hold_back_replication`, and the
promotion is done by the Sentinels or by the cluster itself. The same
scenario (``FailoverLosesLock``) then runs on each, and its timeline is drawn
by the same code.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import cast

import redis

from lockguide_lab.errors import ScenarioError
from lockguide_lab.testbed.base import FailoverPair
from lockguide_lab.testbed.deployments import (
    ClusterDeployment,
    SentinelDeployment,
    crash_before_replication,
    hold_back_replication,
)
from lockguide_lab.testbed.process import RedisServer
from lockguide_lab.testbed.real import RealTestbed

__all__ = ["ClusterFailoverPair", "DeploymentTestbed", "SentinelFailoverPair"]

#: On a cluster every scenario key carries this hash tag: one slot, one known master.
CLUSTER_TAG = "{lockguide-lab}"


def _replicated(primary: RedisServer, tag: str) -> None:
    """A write on the primary, then ``WAIT 1``: the replica has everything so far.

    ``WAIT`` is documented for the calling connection's writes, hence the write
    first; acknowledging it covers every earlier write (one ordered stream).
    """
    with primary.admin() as admin:
        admin.set(f"{tag}:synced", 1)
        if int(admin.wait(1, 5000)) < 1:
            raise ScenarioError("the replica did not acknowledge the primary's writes")


class SentinelFailoverPair(FailoverPair):
    """The Sentinel deployment's primary and replica; the Sentinels promote."""

    def __init__(self, deployment: SentinelDeployment) -> None:
        self.deployment = deployment
        self.primary = deployment.primary()
        self.replica = deployment.replica()
        self._clients: list[redis.Redis] = []

    def client(self) -> redis.Redis:
        sentinel = self.deployment.sentinel()
        master = sentinel.master_for(self.deployment.service, socket_timeout=5.0)  # type: ignore[no-untyped-call]
        client = cast(redis.Redis, master)
        self._clients.append(client)
        return client

    def sync(self) -> None:
        _replicated(self.primary, "lockguide-lab")

    def lag(self) -> None:
        hold_back_replication(self.primary, self.replica)

    def fail_over(self) -> None:
        """``SIGKILL`` the primary; the Sentinels promote the replica that lagged."""
        crash_before_replication(self.primary, self.replica)
        self.deployment.wait_for_new_primary(self.primary)

    def stop(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self.deployment.heal()
        with self.deployment.primary().admin() as admin:
            admin.flushall()


class ClusterFailoverPair(FailoverPair):
    """The master serving :data:`CLUSTER_TAG`'s slot and its replica; the cluster promotes."""

    def __init__(self, cluster: ClusterDeployment) -> None:
        self.cluster = cluster
        self.primary = cluster.master_of(CLUSTER_TAG)
        self.replica = cluster.replica_of(self.primary)
        self._clients: list[redis.Redis] = []

    def client(self) -> redis.Redis:
        """A ``RedisCluster`` client (the locks take it as they take a ``redis.Redis``)."""
        client = cast(redis.Redis, self.cluster.client())
        self._clients.append(client)
        return client

    def sync(self) -> None:
        _replicated(self.primary, CLUSTER_TAG)

    def lag(self) -> None:
        hold_back_replication(self.primary, self.replica)

    def fail_over(self) -> None:
        """``SIGKILL`` the master; its replica that lagged wins the cluster's election.

        Then each client makes one read, as an application's own traffic
        through it would: a ``RedisCluster`` re-learns the slots when a command
        meets the dead node. (A lock alone meets it too, and its first request
        fails once: see ``Lock``.) The relay model disconnects its clients for
        the same reason.
        """
        crash_before_replication(self.primary, self.replica)
        self.cluster.wait_for_promotion(self.replica)
        for client in self._clients:
            client.exists(CLUSTER_TAG)

    def stop(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self.cluster.heal()
        with self.cluster.client() as client:
            client.flushall()


class DeploymentTestbed(RealTestbed):
    """A :class:`RealTestbed` whose failover pair is a real Sentinel setup or Redis Cluster.

    Args:
        deployment: the running deployment (the caller starts and stops it).
        base, resource: as :class:`RealTestbed`'s (the resource is never on the deployment).
    """

    def __init__(
        self,
        deployment: SentinelDeployment | ClusterDeployment,
        base: Path | None = None,
        *,
        resource: redis.Redis | None = None,
    ) -> None:
        super().__init__(base, resource=resource)
        self.deployment = deployment
        self._pairs: list[SentinelFailoverPair | ClusterFailoverPair] = []
        if isinstance(deployment, ClusterDeployment):
            self.label = "Redis Cluster (3 masters, 3 replicas), real time"
        else:
            self.label = "primary and replica behind 3 Sentinels, real time"

    def key(self, name: str) -> str:
        """On a cluster, ``name`` with the lab's hash tag, so it lives on a known master."""
        if isinstance(self.deployment, ClusterDeployment):
            return f"{CLUSTER_TAG}:{name}"
        return name

    def failover_pair(self) -> FailoverPair:
        pair: SentinelFailoverPair | ClusterFailoverPair
        if isinstance(self.deployment, ClusterDeployment):
            pair = ClusterFailoverPair(self.deployment)
        else:
            pair = SentinelFailoverPair(self.deployment)
        self._pairs.append(pair)
        return pair

    def reset(self) -> None:
        while self._pairs:
            self._pairs.pop().stop()
        super().reset()
