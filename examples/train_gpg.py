"""Train with GPG (arXiv 2504.02546) through trl_ext.GPGTrainer.

    accelerate launch examples/train_gpg.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_gpg.py --config configs/gpg.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the gpg-specific ones are `--loss_agg_mode`, `--f_norm`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("gpg")
