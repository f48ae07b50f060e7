"""Train with SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347) through trl_ext.SAPOTrainer.

    accelerate launch examples/train_sapo.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_sapo.py --config configs/sapo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the sapo-specific ones are `--tau_pos`, `--tau_neg`,
`--loss_agg_mode`, `--detach_gate`, `--advantage_epsilon`, `--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("sapo")
