"""Train with TOPR (Tapered Off-Policy REINFORCE, arXiv 2503.14286) through trl_ext.TOPRTrainer.

    accelerate launch examples/train_topr.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_topr.py --config configs/topr.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the topr-specific ones are `--advantage_threshold`,
`--loss_agg_mode`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("topr")
