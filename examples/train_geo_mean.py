"""Train with GMPO (arXiv 2507.20673) through trl_ext.GMPOTrainer.

    accelerate launch examples/train_geo_mean.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_geo_mean.py --config configs/geo_mean.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the geo_mean-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("geo_mean")
