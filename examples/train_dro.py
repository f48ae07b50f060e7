"""Train with DRO (arXiv 2405.19107) through trl_ext.DROTrainer.

    accelerate launch examples/train_dro.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_dro.py --config configs/dro.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the dro-specific ones are `--dro_beta`, `--loss_agg_mode`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("dro")
