"""The asynchronous trainer on CUDA: TRL's flash-attention path for packed tree rows (FA3 through the `kernels`
package, Hopper GPUs) gives the log-probs of trl_ext's SDPA path, and trains with trl_ext's losses. Skipped without
CUDA (`pytest -m gpu`); the flash tests also without a loadable FA3 kernel."""

from __future__ import annotations

import math

import pytest
import torch
from trainer_helpers import changed, logged, snapshot
from transformers import AttentionInterface
from trl.experimental.async_grpo import packing
from trl.trainer.utils import add_fused_lm_head, create_model_from_path

from trl_ext import AsyncGRPOConfig, AsyncGRPOTrainer, toy
from trl_ext.trainers.asynchronous.tree_attention import tree_sdpa_attention, use_tree_attention


def _flash_loads() -> bool:
    try:
        packing._flash_attn()
    except Exception:
        return False
    return torch.cuda.is_available()


FLASH = pytest.mark.skipif(not _flash_loads(), reason="needs FA3 through the kernels package (a Hopper GPU)")


def _packed_row(tokenizer) -> dict[str, torch.Tensor]:
    """Two prompts × three completions of different lengths, packed into one tree row as TRL packs it."""
    row = packing.TreeRow()
    generator = torch.Generator().manual_seed(0)
    for group, prompt in enumerate(toy.toy_dataset(2)["prompt"]):
        ids = tokenizer(prompt)["input_ids"]
        for length in (3, 5, 8):
            completion = torch.randint(10, tokenizer.vocab_size - 1, (length,), generator=generator).tolist()
            row.add(
                {
                    "input_ids": torch.tensor(ids + completion),
                    "completion_mask": torch.tensor([0] * len(ids) + [1] * length),
                    "old_log_probs": torch.zeros(len(ids) + length),
                    "advantage": 0.0,
                    "group_id": group,
                }
            )
    return row.pack()


@FLASH
def test_flash_and_sdpa_tree_attention_agree_on_cuda(tiny_model):
    packed = {k: v.cuda() for k, v in _packed_row(toy.build_tokenizer()).items()}
    model = create_model_from_path(
        tiny_model, device_map=None, attn_implementation=packing.TREE_ATTENTION, dtype="bfloat16"
    ).cuda()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    kwargs = {key: packed[key] for key in ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")}
    kwargs["tree_max_seqlen_q"], kwargs["tree_max_seqlen_k"] = packed["tree_max_seqlens"].tolist()
    inputs = {key: packed[key][None] for key in ("input_ids", "position_ids", "shift_labels")}
    results = {}
    for path, function in (("flash", packing.tree_attention), ("sdpa", tree_sdpa_attention)):
        AttentionInterface.register(packing.TREE_ATTENTION, function)
        with torch.no_grad():
            out = model(**inputs, fused_lm_head=True, **kwargs)
        results[path] = out.log_probs.flatten()[packed["token_index"]].float()
    assert use_tree_attention("cuda") == "flash"
    torch.testing.assert_close(results["flash"], results["sdpa"], rtol=0, atol=3e-2)  # bf16 attention


@pytest.mark.parametrize(
    ("attention", "overrides"),
    [
        pytest.param("flash", {"policy_loss_fn": "decoupled_ppo"}, marks=FLASH),
        pytest.param("flash", {"policy_loss_fn": "m2po", "rollout_is": "token"}, marks=FLASH),
        ("any", {"beta": 0.04, "entropy_coef": 0.01}),
    ],
)
def test_the_async_trainer_trains_on_cuda(attention, overrides, tiny_model, tmp_path):
    config = AsyncGRPOConfig(
        output_dir=str(tmp_path),
        bf16=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=4,
        learning_rate=1e-3,
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=8,
        rollout_backend="transformers",
        token_budget=0,
        model_init_kwargs={"dtype": "bfloat16"},
        **overrides,
    )
    trainer = AsyncGRPOTrainer(
        model=tiny_model, reward_funcs=toy.toy_reward, args=config, train_dataset=toy.toy_dataset(128)
    )
    assert trainer.model.device.type == "cuda" and trainer.model.dtype == torch.bfloat16
    if attention == "flash":
        assert trainer.attention_path == "flash"
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model)
    for name in ("loss", "policy_loss", "entropy", "trained_staleness_mean"):
        values = logged(trainer, name)
        assert values and all(math.isfinite(v) for v in values), (name, values)
