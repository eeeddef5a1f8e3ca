"""The one dynamic part of the packaging: where the ``lab`` extra comes from.

``lockguide`` (this directory) is the reference library and depends on ``redis``
only. The lab (failure scenarios, timelines, the audit) is a second project in
``lab/``, so that the ``lockguide`` wheel never contains it. ``pip install
'.[lab]'`` installs both: the extra names the lab project by its path in this
checkout, which is why it is computed here rather than written in pyproject.toml.
A wheel built for an index would name the lab by its published version instead.

The consensus locks' client libraries are extras too, imported only when such a
lock is made: ``lockguide[etcd]`` (urllib3, for the etcd v3 JSON gateway) and
``lockguide[zookeeper]`` (kazoo).
"""

from pathlib import Path

from setuptools import setup

LAB = Path(__file__).resolve().parent / "lab"

setup(
    extras_require={
        "lab": [f"lockguide-lab @ {LAB.as_uri()}"],
        "etcd": ["urllib3>=2,<3"],
        "zookeeper": ["kazoo>=2.10,<3"],
    }
)
