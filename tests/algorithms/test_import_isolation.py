"""`trl_ext.losses`, `trl_ext.advantages` and the algorithm table need nothing but torch (docs/design.md §1).

The check runs in a fresh interpreter whose import system refuses the heavy packages, as if they were
not installed. numpy is blocked too: torch 2.13 imports without it (it only warns that NumPy could
not be initialized), so the pure-torch layers must not need it either.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("trl", "transformers", "peft", "accelerate", "datasets", "wandb", "numpy")

SCRIPT = textwrap.dedent(
    """
    import sys
    import warnings

    BLOCKED = {blocked!r}


    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                # what a missing package raises
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
            return None


    sys.meta_path.insert(0, Blocker())
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

    import torch
    import trl_ext.losses
    import trl_ext.advantages
    import trl_ext

    spec = trl_ext.get_algorithm("sapo")
    assert spec.policy_loss_fn == "sapo", spec

    # the pure layers work, not just import
    lp = torch.tensor([[-1.0, -0.5, -2.0]], requires_grad=True)
    fn = trl_ext.losses.get_policy_loss(spec.policy_loss_fn)
    loss, metrics = fn(
        logprob=lp, old_logprob=lp.detach() - 0.1, action_mask=torch.tensor([[1, 1, 0]]), advantages=torch.ones(1)
    )
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    kl, _ = trl_ext.losses.get_kl_fn("k3").calculate_kl_loss(lp, lp.detach(), torch.ones(1, 3))
    adv = trl_ext.advantages.get_advantage_fn(spec.advantage_fn)(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    assert adv.shape == (2,), adv

    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("ISOLATION-OK")
    """
)


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_pure_layers_import_without_heavy_dependencies():
    result = _run(SCRIPT.format(blocked=BLOCKED))
    assert result.returncode == 0, result.stderr
    assert "ISOLATION-OK" in result.stdout


def test_blocker_actually_blocks():
    """Guard on the harness: with the same finder, importing a blocked package fails."""
    script = SCRIPT.format(blocked=BLOCKED).replace("import trl_ext.losses\n", "import trl_ext.losses\nimport trl\n")
    result = _run(script)
    assert result.returncode != 0
    assert "No module named 'trl' (blocked by the test)" in result.stderr
