"""Train with on-policy distillation (Thinking Machines 2025; Agarwal et al. 2024, arXiv 2306.13649: the student
samples, a frozen teacher scores the sampled tokens, and kl_coef·(teacher log-prob − student log-prob) is the
per-token advantage) through trl_ext.OnPolicyDistillTrainer.

    accelerate launch examples/train_on_policy_distill.py     # offline tiny default: the toy task's embedded teacher
    accelerate launch examples/train_on_policy_distill.py --config configs/on_policy_distill.yaml \
        --model_name_or_path Qwen/Qwen3-1.7B --teacher_model_name_or_path Qwen/Qwen3-8B --dataset_name <prompts>

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the distillation-specific ones are
`--teacher_model_name_or_path`, `--teacher_model_init_kwargs '{"dtype": "bfloat16"}'`, `--teacher_device`,
`--kl_coef`, `--distill_baseline`, `--policy_loss_fn ppo|importance_sampling`, `--reward_weight` (with
`--reward_funcs`) and `--reward_advantage_fn`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("on_policy_distill")
