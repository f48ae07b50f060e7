"""Train with REINFORCE++ (arXiv 2501.03262) through trl_ext.ReinforcePlusPlusTrainer.

    accelerate launch examples/train_reinforceplusplus.py        # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_reinforceplusplus.py --config configs/reinforceplusplus.yaml \
        --model_name_or_path <model> --dataset_name <dataset> --reward_funcs accuracy_reward \
        [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the reinforceplusplus-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`, `--enable_sequence_masking`,
`--delta_sequence_masking`, `--fallback_to_policy_gradient`, `--gamma`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("reinforceplusplus")
