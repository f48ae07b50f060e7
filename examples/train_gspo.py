"""Train with GSPO (Group Sequence Policy Optimization, arXiv 2507.18071) through trl_ext.GSPOTrainer.

    accelerate launch examples/train_gspo.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_gspo.py --config configs/gspo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the gspo-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`, `--loss_agg_mode`, `--advantage_epsilon`, `--std_threshold`,
`--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("gspo")
