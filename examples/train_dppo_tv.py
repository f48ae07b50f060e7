"""Train with DPPO-Binary-TV (arXiv 2602.04879) through trl_ext.DPPOTVTrainer.

    accelerate launch examples/train_dppo_tv.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_dppo_tv.py --config configs/dppo_tv.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the dppo_tv-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("dppo_tv")
