"""Train with VESPO (Variational Sequence-Level Soft Policy Optimization, arXiv 2602.10693; TRL's
`loss_type="vespo"`) through trl_ext.VESPOTrainer.

    accelerate launch examples/train_vespo.py                    # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_vespo.py --config configs/vespo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the vespo-specific ones are `--k_pos`, `--lambda_pos`,
`--k_neg`, `--lambda_neg`, `--loss_agg_mode`, `--advantage_epsilon`, `--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("vespo")
