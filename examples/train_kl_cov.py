"""Train with KL-Cov (arXiv 2505.22617) through trl_ext.KLCovTrainer.

    accelerate launch examples/train_kl_cov.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_kl_cov.py --config configs/kl_cov.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the kl_cov-specific ones are `--kl_cov_ratio`, `--ppo_kl_coef`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("kl_cov")
