"""Train with JSD on-policy distillation (Agarwal et al. 2024, GKD, arXiv 2306.13649: the student samples, a frozen
teacher scores the sampled tokens, and the per-token policy-gradient weight of −kl_coef·JSD_β(student, teacher) is
the advantage; Trinity-RFT's `jsd`) through trl_ext.JSDTrainer.

    accelerate launch examples/train_jsd.py                      # offline tiny default: the toy task's teacher
    accelerate launch examples/train_jsd.py --config configs/jsd.yaml \
        --model_name_or_path Qwen/Qwen3-1.7B --teacher_model_name_or_path Qwen/Qwen3-8B --dataset_name <prompts>

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the JSD-specific ones are `--teacher_model_name_or_path`,
`--teacher_model_init_kwargs '{"dtype": "bfloat16"}'`, `--teacher_device`, `--kl_coef`, `--lambda_coef` (β: 0.5
the symmetric JSD, 0 KL(student‖teacher), 1 KL(teacher‖student)), `--jsd_temperature`, `--jsd_form` (`reference`:
Trinity-RFT's advantage), `--reward_weight` (with `--reward_funcs`) and `--reward_advantage_fn`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("jsd")
