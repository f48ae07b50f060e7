"""Train with REC (Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm, arXiv 2509.24203)
through trl_ext.RECTrainer.

    accelerate launch examples/train_rec.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_rec.py --config configs/rec.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the rec-specific ones are `--rec_epsilon_low`,
`--rec_epsilon_high`, `--rec_epsilon_low_prime`, `--rec_epsilon_high_prime`, `--rec_clip_mode`,
`--rec_weight`, `--rec_regularizer`, `--rec_regularizer_coef`, `--rec_temp`, `--advantage_epsilon`,
`--std_normalize`, `--drop`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("rec")
