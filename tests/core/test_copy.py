"""Copying ``Lock`` into a codebase: two files, no edits, and it works once built as a wheel.

The two files (``lock.py`` and ``_core.py``, which import each other relatively)
go into a package of the test's own, which is built into a wheel with pip and
installed into a directory of its own; the installed copy takes, extends and
releases a lock. The Lua scripts are inline in the Python source, so there is no
package data to forget.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from lockguide._core import EXTEND, HAND_OFF, RELEASE, TAKE
from lockguide.fencing import FENCED_ACQUIRE, FENCED_WRITE
from lockguide.versioned import CAS_VERSION
from tests.support import lua_code

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "lockguide"
FILES = ["lock.py", "_core.py"]

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "yourapp"
version = "1.0"

[tool.setuptools]
packages = ["yourapp", "yourapp.locking"]
"""

USE = """
import sys
sys.path.insert(0, {site!r})
import fakeredis
import yourapp.locking.lock as copied
from yourapp.locking.lock import Lock

assert "site" in copied.__file__, copied.__file__
r = fakeredis.FakeRedis()
with Lock(r, "lock:copied", ttl_ms=5_000) as lock:
    assert r.get("lock:copied") == lock.value.encode()
    lock.extend()
assert r.exists("lock:copied") == 0
print("the installed copy works")
"""


def test_lock_copied_as_two_files_works_from_a_built_wheel(tmp_path: Path) -> None:
    project = tmp_path / "project"
    package = project / "yourapp" / "locking"
    package.mkdir(parents=True)
    for init in (project / "yourapp", package):
        (init / "__init__.py").write_text("", "utf-8")
    for name in FILES:
        shutil.copy(SRC / name, package / name)  # no edits
    (project / "pyproject.toml").write_text(PYPROJECT, "utf-8")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")]
    subprocess.run([*build, str(project)], check=True, capture_output=True, timeout=120)
    (wheel,) = (tmp_path / "dist").glob("yourapp-*.whl")
    site = tmp_path / "site"
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    shutil.rmtree(project)  # nothing of the source tree is left to import from
    done = subprocess.run(
        [sys.executable, "-I", "-c", USE.format(site=str(site))],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the installed copy works"
    readme = (ROOT / "README.md").read_text("utf-8")
    for name in FILES:
        assert f"src/lockguide/{name}" in readme, f"the README names {name}"


def test_the_lua_files_the_guide_shows_are_the_scripts_the_code_runs() -> None:
    scripts = {
        "release.lua": RELEASE.source,
        "extend.lua": EXTEND.source,
        "take.lua": TAKE.source,
        "hand_off.lua": HAND_OFF.source,
        "cas_version.lua": CAS_VERSION,
        "fenced_acquire.lua": FENCED_ACQUIRE.source,
        "fenced_write.lua": FENCED_WRITE.source,
    }
    for name, source in scripts.items():  # the same code; the inline copy may skip comments
        assert lua_code(source) == lua_code((SRC / "scripts" / name).read_text("utf-8")), name
