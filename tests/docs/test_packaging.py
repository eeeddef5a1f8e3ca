"""The two rooms, as a reader installs them: the ``lockguide`` wheel holds the reference only.

Built from this checkout with the environment's own setuptools (no download).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_reference_and_needs_redis_only(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir"]
    subprocess.run([*pip, *build, str(tmp_path), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("lockguide-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    assert {name.split("/")[0] for name in names} == {"lockguide", metadata.split("/")[0]}
    assert "lockguide/scripts/release.lua" in names
    assert not [n for n in names if "lockguide_lab" in n or "/tests/" in n]
    needed = [r for r in requires if "extra ==" not in r]
    assert len(needed) == 1
    assert needed[0].startswith("redis")
    extras = {r.split("extra ==")[1].strip(" \"'") for r in requires if "extra ==" in r}
    assert extras <= {"lab", "etcd", "zookeeper"}
