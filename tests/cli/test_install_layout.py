"""Run from the folder that holds the clone (`git clone ... trl_ext; cd ..`: a folder named trl_ext, with the package
at trl_ext/trl_ext/), `import trl_ext` finds the package, not the clone's folder as an empty namespace package."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig

import trl_ext

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _install_note() -> str:
    """Why it failed when this environment's trl_ext is an editable install with setuptools' import finder."""
    finders = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "__editable___trl_ext_*_finder.py"))
    if not finders:
        return "trl_ext is not installed with setuptools' editable import finder"
    return (
        f"trl_ext is installed editable with setuptools' import finder ({finders[0]}), which Python asks after the "
        "current folder: reinstall it (pip install -e .) so that pyproject.toml's package-dir makes it a sys.path entry"
    )


def test_the_folder_holding_the_clone_does_not_shadow_the_package(tmp_path):
    """`python -c` and `python -m` put the current folder first on sys.path; there `trl_ext` is the clone (here a
    link to it), which has no __init__.py. `python -m trl_ext.cli` is also how `trl-ext train --accelerate_config`
    starts its processes, in the same folder."""
    os.symlink(ROOT, tmp_path / "trl_ext", target_is_directory=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONSAFEPATH"}
    env["OMP_NUM_THREADS"] = "1"

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)

    imported = run("-c", "import trl_ext; print(trl_ext.__version__); print(trl_ext.__file__)")
    assert imported.returncode == 0, f"{_install_note()}\n{imported.stderr[-2000:]}"
    version, path = imported.stdout.split()
    assert version == trl_ext.__version__ and os.path.samefile(path, trl_ext.__file__)  # the package these tests test
    listed = run("-m", "trl_ext.cli", "list")
    assert listed.returncode == 0, f"{_install_note()}\n{listed.stderr[-2000:]}"
    assert "  sapo               SAPOTrainer" in listed.stdout
