"""Train with CISPO (MiniMax-M1, arXiv 2506.13585) through trl_ext.CISPOTrainer.

    accelerate launch examples/train_cispo.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_cispo.py --config configs/cispo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the cispo-specific ones are `--clip_range_low`,
`--clip_range_high`, `--enable_mask_clip`, `--mask_clip_range_low`, `--mask_clip_range_high`,
`--loss_agg_mode`, `--advantage_epsilon`, `--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("cispo")
