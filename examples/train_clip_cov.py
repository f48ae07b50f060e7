"""Train with Clip-Cov (arXiv 2505.22617) through trl_ext.ClipCovTrainer.

    accelerate launch examples/train_clip_cov.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_clip_cov.py --config configs/clip_cov.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the clip_cov-specific ones are `--clip_cov_ratio`,
`--clip_cov_lb`, `--clip_cov_ub`, `--clip_range`, `--selection_seed`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("clip_cov")
