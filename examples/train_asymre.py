"""Train with AsymRE (Asymmetric REINFORCE, arXiv 2506.20520) through trl_ext.AsymRETrainer.

    accelerate launch examples/train_asymre.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_asymre.py --config configs/asymre.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the asymre-specific ones are `--tau`, `--loss_agg_mode`,
`--baseline_shift`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("asymre")
