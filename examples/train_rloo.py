"""Train with RLOO (REINFORCE Leave-One-Out, arXiv 2402.14740) through trl_ext.RLOOTrainer.

    accelerate launch examples/train_rloo.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_rloo.py --config configs/rloo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the rloo-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`, `--enable_sequence_masking`,
`--delta_sequence_masking`, `--fallback_to_policy_gradient`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("rloo")
