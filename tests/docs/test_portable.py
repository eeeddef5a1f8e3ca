"""Nothing of one machine is committed: no symlink out of the repository, no developer's path.

A clone must work wherever it lands. A tracked symlink whose target leaves the
repository (an absolute path, or ``..`` past its root) points at one developer's
disk: on a clean clone it dangles, or loops ("Too many levels of symbolic links").
An absolute path of a developer's machine in a tracked file (``/work/...``,
``/root/...``, ``/home/NAME/...``, ``/Users/NAME/...``, a fixed ``/tmp/...``) works
on that machine only; code finds its files from ``__file__`` or a fixture's
``tmp_path`` instead.

Both rules read what git tracks (``git ls-files``): the symlinks from their blobs,
so the rule holds before anything is checked out, and the other files from the work
tree, so an edit not yet committed is checked too.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sitebuild import ROOT

#: This file, which names such paths to test the rule on them: the one file not scanned.
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: An absolute path into a developer's home, a machine's work area or a fixed temporary
#: directory: ``/work/``, ``/root/``, ``/tmp/``, ``/home/NAME/``, ``/Users/NAME/``, or
#: ``C:\\Users\\NAME\\``, not preceded by a name character (``.github/workflows/`` and
#: ``lab/src/`` are relative paths, not matches).
MACHINE_PATH = re.compile(
    r"(?<![\w.~/-])(?:/(?:work|root|tmp)/|/(?:home|Users)/[^/\s\"'`]+/|[A-Za-z]:\\Users\\)"
)


def tracked() -> list[tuple[str, str, str]]:
    """``(mode, blob, path)`` of every file git tracks in the repository."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git clone: nothing tracked to check")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--stage", "-z"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    found = []
    for entry in filter(None, listed.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, blob, _stage = meta.split()
        found.append((mode, blob, path))
    return found


def blob(sha: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "blob", sha],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()


def leaves_the_repository(link: str, target: str) -> bool:
    """Whether a symlink at ``link`` (relative to the root) pointing at ``target`` escapes."""
    if posixpath.isabs(target) or re.match(r"[A-Za-z]:[\\/]", target):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    return joined == ".." or joined.startswith("../")


def test_no_tracked_symlink_leaves_the_repository() -> None:
    escaping = [
        f"{path} -> {target}"
        for mode, sha, path in tracked()
        if mode == "120000" and leaves_the_repository(path, target := blob(sha))
    ]
    assert not escaping, (
        "tracked symlinks pointing outside the repository (git rm --cached them and ignore "
        f"them): {escaping}"
    )


def test_no_tracked_file_names_a_path_of_one_machine() -> None:
    found = []
    for mode, sha, path in tracked():
        if path == HERE:
            continue
        if mode == "120000":
            text = blob(sha)
        elif mode.startswith("100") and (ROOT / path).is_file():
            data = (ROOT / path).read_bytes()
            if b"\0" in data:
                continue  # binary: images, fonts
            text = data.decode("utf-8", errors="replace")
        else:
            continue  # a submodule, or a file deleted but not yet staged
        for number, line in enumerate(text.splitlines(), 1):
            if match := MACHINE_PATH.search(line):
                found.append(f"{path}:{number}: {match.group()} in {line.strip()[:120]!r}")
    assert not found, "absolute paths of one machine in tracked files:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "machine"),
    [
        ("node_modules -> /work/main/tests/browser/node_modules", True),
        ('open("/home/alice/src/lockguide/docs/x.md")', True),
        ("cd /root/lockguide && make", True),
        ("log = '/tmp/lockguide.log'", True),
        ("C:\\Users\\bob\\lockguide", True),
        ("see .github/workflows/ci.yml", False),
        ("lab/src/lockguide_lab/audit/", False),
        ("python3 ../shared/tools/prose_words.py", False),
        ("tmp_path / 'work' / 'root'", False),
    ],
)
def test_the_machine_path_rule_tells_a_machine_from_the_repository(
    text: str, machine: bool
) -> None:
    assert bool(MACHINE_PATH.search(text)) is machine


@pytest.mark.parametrize(
    ("link", "target", "escapes"),
    [
        ("tests/browser/node_modules", "/work/main/tests/browser/node_modules", True),
        ("tests/browser/node_modules", "../../../elsewhere/node_modules", True),
        ("docs/snippets", "../snippets", False),
        ("a/b/c", "../../d", False),
    ],
)
def test_the_symlink_rule_follows_relative_targets(link: str, target: str, escapes: bool) -> None:
    assert leaves_the_repository(link, target) is escapes
