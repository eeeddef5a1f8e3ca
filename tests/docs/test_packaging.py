"""The two rooms, as a reader installs them: the ``lockguide`` wheel holds the reference only.

Built from this checkout with the environment's own setuptools (no download).
"""

from __future__ import annotations

import os
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


def _build(project: Path, name: str, out: Path) -> tuple[Path, Path]:
    """``python -m build`` (sdist and wheel, this environment's setuptools): the two files."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (sdist,) = out.glob(f"{name}-*.tar.gz")
    (wheel,) = out.glob(f"{name}-*.whl")
    return sdist, wheel


def test_both_distributions_build_pass_twine_and_install_without_a_checkout(
    tmp_path: Path,
) -> None:
    """The reference and the lab as a reader gets them: two files each, no source tree.

    Each distribution builds as an sdist and a wheel, passes ``twine check``, and
    installs from its wheel into a fresh virtualenv, where ``lockguide`` and
    ``lockguide_lab`` are imported from that virtualenv (not from this checkout)
    and a lock runs with its scripts from the installed package.
    """
    dist = tmp_path / "dist"
    dist.mkdir()
    core = _build(ROOT, "lockguide", dist)
    lab = _build(ROOT / "lab", "lockguide_lab", dist)
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, [*core, *lab])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert twine.returncode == 0, twine.stdout + twine.stderr
    assert twine.stdout.count("PASSED") == 4, twine.stdout

    # The lab's extra names the lab by its distribution name, which an index can resolve.
    with zipfile.ZipFile(core[1]) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    assert 'Requires-Dist: lockguide-lab==0.1.0; extra == "lab"' in lines

    # A fresh virtualenv: the two wheels installed without their dependencies, which it
    # then reads from this environment's site-packages through a .pth file (a path added
    # that way does not run its own .pth files, so this checkout's editable installs stay out).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", str(core[1]), str(lab[1])],
        check=True,
        capture_output=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    # Written after the install, or pip would see this environment's lockguide as installed.
    ours = next(p for p in sys.path if p.endswith("site-packages"))
    (Path(site) / "deps.pth").write_text(ours + "\n", "utf-8")
    probe = (
        "import fakeredis, lockguide, lockguide_lab\n"
        "from lockguide import Lock\n"
        "with Lock(fakeredis.FakeRedis(), 'lock:installed', ttl_ms=5_000) as lock:\n"
        "    assert lock.held\n"
        "print(lockguide.__file__)\n"
        "print(lockguide_lab.__file__)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = subprocess.run(
        [str(python), "-I", "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stderr
    for line in run.stdout.splitlines():
        assert line.startswith(site), f"imported from {line}, not from the fresh virtualenv"


def test_every_install_line_on_the_site_names_what_a_clone_has() -> None:
    """A reader copies ``pip install ...`` from a page into a clone checked out as
    ``./lockguide``: each path must exist there, and each extra must be one the project
    declares whose requirements an index can serve (the lab's extra names a distribution
    that is only on an index once released, so from a clone the lab is installed as a path)."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]
    local = {"lockguide-lab"}  # built from this repository, not on an index before a release
    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for line in page.read_text("utf-8").splitlines():
            for command in re.findall(r"pip install ([^`#\n]+)", line):
                for arg in command.split():
                    arg = arg.strip("'\"")
                    match = re.fullmatch(r"\./lockguide(/[\w/.-]*)?(?:\[([\w,]+)\])?", arg)
                    if not match:
                        continue
                    found += 1
                    where = f"{page.relative_to(ROOT)}: {arg}"
                    assert (ROOT / (match[1] or "/").lstrip("/")).is_dir(), where
                    for extra in (match[2] or "").split(",") if match[2] else []:
                        assert extra in extras, where
                        needs = {re.split(r"[<>=!\[; ]", r, maxsplit=1)[0] for r in extras[extra]}
                        assert not needs & local, (
                            f"{where}: from a clone, install the lab as a path"
                        )
    assert found, "no install line found on the site"
