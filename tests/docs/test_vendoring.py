"""The README's way to copy ``Lock`` into a codebase that cannot add a dependency works.

The files the README names are copied into a package of the test's own, the
``lockguide`` names rewritten as it says, and the copy takes and releases a lock.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "lockguide"
FILES = ["lock.py", "_core.py"]

USE = """
import fakeredis
from yourapp.locking.lock import Lock

r = fakeredis.FakeRedis()
with Lock(r, "lock:copied", ttl_ms=5_000) as lock:
    assert r.get("lock:copied") == lock.value.encode()
assert r.exists("lock:copied") == 0
print("the copy works")
"""


def test_lock_copied_as_the_readme_says_takes_and_releases_a_lock(tmp_path: Path) -> None:
    package = tmp_path / "yourapp" / "locking"
    package.mkdir(parents=True)
    for init in (tmp_path / "yourapp", package):
        (init / "__init__.py").write_text("", "utf-8")
    for name in FILES:  # unchanged: the two files import each other relatively
        shutil.copy(SRC / name, package / name)
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{USE}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the copy works"
    for name in FILES:
        assert name in (ROOT / "README.md").read_text("utf-8"), f"the README names {name}"
