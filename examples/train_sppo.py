"""Train with sPPO (arXiv 2108.05828) through trl_ext.SPPOTrainer.

    accelerate launch examples/train_sppo.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_sppo.py --config configs/sppo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the sppo-specific ones are `--sppo_epsilon`,
`--loss_agg_mode`, `--advantage_epsilon`, `--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("sppo")
