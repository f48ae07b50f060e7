"""verl 0.9.1's `compute_pf_ppo_reweight_data`: Policy-Filtration PPO's reweighted resampling of a batch (Gu et al.
2024, "Policy Filtration in RLHF to Fine-Tune LLM for Code Generation", arXiv 2409.06957).

Each row's score s is its summed `token_level_scores`; its weight is

    pow          |s|^p                          (p = `weight_pow`)
    max_min      1 on the rows with the batch's max or min score, else 0
    max_random   0.4 on the rows with the max score, else 0.1

then w = max(w + 1e-8, 1e-8), and B rows are drawn with replacement ∝ w (`torch.multinomial`, torch's global
generator: the same rows as verl under the same seed). The batch is duck-typed like verl's `DataProto`: `.batch` a
mapping of `[B, ...]` tensors (a TensorDict: rebuilt with its type and `batch_size`), `.non_tensor_batch` a mapping of
numpy arrays or lists, `.meta_info` a mapping whose lists of length B are resampled too. The input is not changed: the
result is a deep copy with the resampled fields.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import torch

__all__ = ["PF_PPO_REWEIGHT_METHODS", "compute_pf_ppo_reweight_data"]

PF_PPO_REWEIGHT_METHODS = ("pow", "max_min", "max_random")


@torch.no_grad()
def _weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    if reweight_method == "pow":
        return torch.pow(torch.abs(scores), weight_pow)
    if reweight_method == "max_min":
        return torch.where((scores == scores.max()) | (scores == scores.min()), 1.0, 0.0)
    return torch.where(scores == scores.max(), 0.4, 0.1)


def compute_pf_ppo_reweight_data(data: Any, reweight_method: str = "pow", weight_pow: float = 2.0) -> Any:
    """A resampled deep copy of `data` (see the module docstring).

    Args:
        data: A `DataProto`-like batch with `batch["token_level_scores"]` `[B, T]`.
        reweight_method: One of `PF_PPO_REWEIGHT_METHODS`.
        weight_pow: The exponent p of `pow`.

    Raises:
        ValueError: An unknown `reweight_method`.
        TypeError: `data` lacks `batch` (with `token_level_scores`), `non_tensor_batch` or `meta_info`.
    """
    if reweight_method not in PF_PPO_REWEIGHT_METHODS:
        raise ValueError(
            f"compute_pf_ppo_reweight_data: Unsupported reweight_method: {reweight_method}; expected one of "
            f"{list(PF_PPO_REWEIGHT_METHODS)}"
        )
    missing = [name for name in ("batch", "non_tensor_batch", "meta_info") if not hasattr(data, name)]
    if missing or "token_level_scores" not in data.batch.keys():
        what = ", ".join(missing) or "batch['token_level_scores']"
        raise TypeError(f"compute_pf_ppo_reweight_data: data must be a DataProto-like batch; it lacks {what}")
    import numpy as np  # verl's non_tensor_batch holds numpy arrays (numpy is not needed to import this package)

    scores = data.batch["token_level_scores"].sum(dim=-1)
    weights = torch.clamp(_weights(scores, reweight_method, weight_pow) + 1e-8, min=1e-8)
    batch_size = scores.shape[0]
    sample_indices = torch.multinomial(weights, batch_size, replacement=True)

    resampled_batch = {key: tensor[sample_indices] for key, tensor in data.batch.items()}
    indices = sample_indices.numpy()
    resampled_non_tensor_batch = {
        key: array[indices] if isinstance(array, np.ndarray) else [array[i] for i in indices]
        for key, array in data.non_tensor_batch.items()
    }
    resampled_meta_info = {
        key: [value[i] for i in indices] if isinstance(value, list) and len(value) == batch_size else value
        for key, value in data.meta_info.items()
    }
    resampled = deepcopy(data)
    resampled.batch = type(data.batch)(resampled_batch)
    if hasattr(data.batch, "batch_size"):
        resampled.batch.batch_size = data.batch.batch_size
    resampled.non_tensor_batch = resampled_non_tensor_batch
    resampled.meta_info = resampled_meta_info
    return resampled
