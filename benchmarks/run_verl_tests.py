"""Dev-only: run verl's own CPU tests of `core_algos` against the real verl and against `trl_ext.compat.verl`.

    python benchmarks/run_verl_tests.py --verl-path DIR --tests DIR [--verl-git GITDIR --git-ref REF] [--mode MODE]

With `--mode shim` (and `both`, the default) `verl.trainer.ppo.core_algos` is REPLACED by `trl_ext.compat.verl`: this
file, loaded as a pytest plugin (`-p run_verl_tests`) before any test module, puts the package in `sys.modules` under
verl's name and on `verl.trainer.ppo`, so the tests and every verl module that imports `core_algos`
(`verl.trainer.ppo.ray_trainer`, `...v1.utils`, `verl.workers.utils.losses`, ...) get trl_ext's; at the end of the
session it checks that no module holds verl's own. `--mode real` runs the tests against verl itself. Each test file
runs in its own pytest process (verl's registry tests clear the registry), and the pass / fail counts are printed
per file and mode (from pytest's JUnit XML); the exit status is 1 if a test fails with the shim.

The files (`TEST_FILES`, under `--tests`, the wheel's `tests/` directory): `tests/trainer/ppo/`
test_core_algos_on_cpu, test_dynamic_policy_losses_on_cpu, test_loss_aggregation_on_cpu,
test_reinforce_pp_multiturn_on_cpu, test_rollout_corr_integration, test_value_loss_normalization_on_cpu;
`tests/trainer/test_multi_trajectories_advantage_on_cpu.py`; and `tests/trainer/config/test_algo_config_on_cpu.py`,
which the wheel does not ship: when it is not under `--tests` it is read with `git show REF:<path>` from the verl
repository `--verl-git` (a bare clone; `--git-ref`, default `main`).

Setup (a scratch venv outside the repository; torch and numpy come from the repository's venv through a `.pth`):

    /root/.pyenv/versions/3.11.7/bin/python3.11 -m venv /tmp/verlvenv
    echo /work/main/.venv/lib/python3.11/site-packages \\
        > /tmp/verlvenv/lib/python3.11/site-packages/zz_main_venv.pth
    /tmp/verlvenv/bin/pip install --no-deps verl==0.9.1 omegaconf hydra-core tensordict==0.10.0 \\
        antlr4-python3-runtime==4.9.3 cloudpickle orjson pyvers importlib_metadata codetiming torchdata pylatexenc
    /tmp/verlvenv/bin/pip install ray==2.49.2 "TransferQueue>=0.1.10" cachetools uvicorn fastapi
    /tmp/verlvenv/bin/python benchmarks/run_verl_tests.py --verl-path /tmp/verlvenv/lib/python3.11/site-packages \\
        --tests /tmp/r41/whl/tests --verl-git /work/.mirror/volcengine+verl/repo

(`--verl-path` may also be an unzipped wheel: the directory holding `verl/`; it is put first on PYTHONPATH.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

SHIM_ENV = "TRL_EXT_VERL_SHIM"
CORE_ALGOS = "verl.trainer.ppo.core_algos"
REPO_ROOT = Path(__file__).resolve().parents[1]
GIT_ONLY = "trainer/config/test_algo_config_on_cpu.py"
TEST_FILES = (
    "trainer/ppo/test_core_algos_on_cpu.py",
    "trainer/ppo/test_dynamic_policy_losses_on_cpu.py",
    "trainer/ppo/test_loss_aggregation_on_cpu.py",
    "trainer/ppo/test_reinforce_pp_multiturn_on_cpu.py",
    "trainer/ppo/test_rollout_corr_integration.py",
    "trainer/ppo/test_value_loss_normalization_on_cpu.py",
    "trainer/test_multi_trajectories_advantage_on_cpu.py",
    GIT_ONLY,
)


# --------------------------------------------------------------------------------------------------
# The shim (this module imported as a pytest plugin with TRL_EXT_VERL_SHIM=1)
# --------------------------------------------------------------------------------------------------


def install_shim() -> None:
    """Make `trl_ext.compat.verl` verl's `core_algos` before any verl module imports it."""
    import trl_ext.compat.verl as shim

    sys.modules[CORE_ALGOS] = shim
    import verl.trainer.ppo

    verl.trainer.ppo.core_algos = shim


def pytest_sessionfinish(session, exitstatus) -> None:
    """With the shim: every loaded module that names `core_algos` holds trl_ext's (else the session fails)."""
    if os.environ.get(SHIM_ENV) != "1":
        return
    import trl_ext.compat.verl as shim

    stray = [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("verl") and getattr(module, "core_algos", shim) is not shim
    ]
    if sys.modules.get(CORE_ALGOS) is not shim or stray:
        print(f"\n[run_verl_tests] verl's own core_algos is loaded (in {stray or [CORE_ALGOS]})", file=sys.stderr)
        session.exitstatus = 1


if os.environ.get(SHIM_ENV) == "1" and __name__ != "__main__":
    install_shim()


# --------------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------------


def counts(junit_xml: Path) -> dict[str, int]:
    """`{"passed", "failed", "skipped"}` of a pytest JUnit XML report (errors count as failed)."""
    result = {"passed": 0, "failed": 0, "skipped": 0}
    if not junit_xml.exists():
        return result
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        key = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        result[key] += 1
    return result


def verl_root(verl_path: str | None) -> Path:
    """The directory holding the `verl/` package: `--verl-path`, else the installed verl's (not imported)."""
    if verl_path is not None:
        return Path(verl_path)
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("verl not found: pass --verl-path DIR (DIR/verl/trainer/ppo/core_algos.py)")
    return Path(next(iter(spec.submodule_search_locations))).parent


def run_file(path: Path, mode: str, verl_path: str | None, workdir: Path) -> tuple[dict[str, int], str]:
    """Run one test file in its own pytest process, in the directory holding `verl/` (test_algo_config reads
    `verl/trainer/config` relative to it); `(counts, the output's tail)`."""
    report = workdir / f"{path.stem}-{mode}.xml"
    env = dict(os.environ)
    paths = [str(Path(__file__).resolve().parent), str(REPO_ROOT)] + ([verl_path] if verl_path else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[SHIM_ENV] = "1" if mode == "shim" else "0"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(path)]
    if mode == "shim":
        command[3:3] = ["-p", "run_verl_tests"]
    done = subprocess.run(command, env=env, cwd=verl_root(verl_path), capture_output=True, text=True, check=False)
    result = counts(report)
    if done.returncode not in (0, 1) or (done.returncode == 1 and not result["failed"]):
        result["failed"] += 1  # a collection error, or the shim check at the end of the session
    return result, (done.stdout + done.stderr)[-3000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verl-path", help="directory holding the verl/ package (default: the installed verl)")
    parser.add_argument("--tests", required=True, help="verl's tests/ directory (the wheel's)")
    parser.add_argument("--verl-git", help="a bare verl repository, for the test files --tests lacks")
    parser.add_argument("--git-ref", default="main", help="the ref of --verl-git to read them at (default: main)")
    parser.add_argument("--mode", choices=("both", "shim", "real"), default="both")
    parser.add_argument("--verbose", action="store_true", help="print the output of failing files")
    args = parser.parse_args()
    modes = ("real", "shim") if args.mode == "both" else (args.mode,)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        failed_with_shim = 0
        print(f"{'file':<55} " + " ".join(f"{mode:>22}" for mode in modes))
        for relative in TEST_FILES:
            path = Path(args.tests) / relative
            if not path.exists() and relative == GIT_ONLY and args.verl_git:
                text = subprocess.run(
                    ["git", f"--git-dir={args.verl_git}", "show", f"{args.git_ref}:tests/{relative}"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                path = workdir / Path(relative).name
                path.write_text(text)
            if not path.exists():
                print(f"{relative:<55} missing")
                failed_with_shim += 1
                continue
            cells = []
            for mode in modes:
                result, tail = run_file(path, mode, args.verl_path, workdir)
                cells.append(f"{result['passed']:>3} passed {result['failed']:>2} failed {result['skipped']:>2} skip")
                if mode == "shim":
                    failed_with_shim += result["failed"]
                if result["failed"] and args.verbose:
                    print(f"--- {relative} [{mode}]\n{tail}")
            print(f"{relative:<55} " + " ".join(f"{cell:>22}" for cell in cells))
        print(f"with the shim: {'all passed' if not failed_with_shim else f'{failed_with_shim} failed'}")
    return 1 if failed_with_shim else 0


if __name__ == "__main__":
    sys.exit(main())
