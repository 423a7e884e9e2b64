"""The container image ships a working package: what the Dockerfile copies, installed the way its RUN line
installs it (``pip install .``) into a fresh virtual environment, holds every package pyproject.toml
declares, and every console script of ``[project.scripts]`` answers ``--help``.

No container engine is needed: the build context is reproduced from the Dockerfile's ``COPY`` lines
(sources relative to the repository, destinations relative to ``WORKDIR``). The runtime dependencies
are not downloaded: the fresh environment sees the installed ones of this interpreter through a
``.pth`` file naming a directory of links to exactly those distributions' files, so
nothing else of this environment (an editable install of this repository, the test packages) can
hide a file the image lacks.
"""
from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_copies(text: str) -> tuple[str, list[tuple[list[str], str]]]:
    """``(WORKDIR, [(sources, destination), ...])`` of the Dockerfile's COPY instructions, in order."""
    workdir, copies = "/", []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = line.strip()
        if not words or words.startswith("#"):
            continue
        instr, _, rest = words.partition(" ")
        instr = instr.upper()
        if instr == "WORKDIR":
            workdir = os.path.join(workdir, rest.strip())
        elif instr in ("COPY", "ADD"):
            args = json.loads(rest) if rest.lstrip().startswith("[") else shlex.split(rest)
            flags = [a for a in args if a.startswith("--")]
            assert not [f for f in flags if f.startswith("--from")], f"multi-stage COPY not handled: {line}"
            paths = [a for a in args if not a.startswith("--")]
            copies.append((paths[:-1], paths[-1]))
    return workdir, copies


def build_context(dockerfile: Path, dest: Path) -> Path:
    """Reproduce the image's ``WORKDIR`` after the COPY lines (Docker's rules for files and directories:
    a directory source copies its contents; several sources or a trailing ``/`` make the destination a
    directory)."""
    workdir, copies = dockerfile_copies(dockerfile.read_text())
    app = dest / workdir.lstrip("/")
    app.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sources, target in copies:
        target_dir = dest / target.lstrip("/") if target.startswith("/") else app / target
        matched = [Path(p) for s in sources for p in sorted(glob.glob(str(ROOT / s)))]
        assert matched, f"COPY {sources}: no such file in the repository"
        into_dir = target.endswith("/") or len(matched) > 1 or target in (".", "./")
        for src in matched:
            if src.is_dir():
                shutil.copytree(src, target_dir, ignore=ignore, dirs_exist_ok=True)
            else:
                to = target_dir / src.name if into_dir else target_dir
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, to)
    return app


def runtime_dependency_dir(pyproject: dict, dest: Path) -> Path:
    """A directory of links to the top-level modules and metadata of the project's runtime
    dependencies, as installed for this interpreter."""
    dest.mkdir()
    for requirement in pyproject["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        dist = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or ()}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or top.endswith(".pth"):  # its metadata comes too (crc32c reads it)
                continue
            (dest / top).symlink_to(Path(dist.locate_file(top)).resolve())
    return dest


def test_image_files_install_every_declared_package_and_console_script(tmp_path):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    app = build_context(ROOT / "Dockerfile", tmp_path / "image")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PYTHONNOUSERSITE": "1"}
    # The image runs `pip install .`; this is the same install (a wheel built from the copied
    # files) without its dependencies, done by this interpreter's pip on the fresh environment.
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--disable-pip-version-check", "--no-deps", str(app)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, env=env).stdout.strip())
    deps = runtime_dependency_dir(pyproject, tmp_path / "deps")
    (site / "runtime-deps.pth").write_text(f"{deps}\n")

    # every console script runs (in parallel: each imports its part of the package)
    scripts = sorted(pyproject["project"]["scripts"])
    assert "sharebroker" in scripts
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    procs = {s: subprocess.Popen([str(venv / "bin" / s), "--help"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env, cwd=run_dir) for s in scripts}
    failures = []
    for s, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0 or "usage" not in out.lower():
            failures.append(f"{s} --help: exit {proc.returncode}\n{out[-500:]}{err[-1500:]}")

    # every package pyproject.toml declares is in the image (pipeline has no console script)
    from setuptools import find_packages

    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    declared = set(find_packages(str(ROOT), include=include))
    assert declared, include
    installed = {p.relative_to(site).parent.as_posix().replace("/", ".") for p in site.rglob("__init__.py")}
    if declared - installed:
        failures.append(f"packages missing from the image: {sorted(declared - installed)}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("text, expected", [
    ("WORKDIR /app\nCOPY a b ./\nCOPY --chown=x:y c ./c\n", ("/app", [(["a", "b"], "./"), (["c"], "./c")])),
    ('WORKDIR /x\nWORKDIR y\nCOPY ["d", "/e/"]\n', ("/x/y", [(["d"], "/e/")])),
    ("COPY f \\\n  g/\n", ("/", [(["f"], "g/")])),
])
def test_dockerfile_copy_lines_are_parsed(text, expected):
    assert dockerfile_copies(text) == expected
