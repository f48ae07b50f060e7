"""Train with DAPO (Yu et al. 2025, arXiv 2503.14476: decoupled clip, token-level loss, dynamic sampling, overlong
reward shaping) through trl_ext.DAPOTrainer.

    accelerate launch examples/train_dapo.py                     # offline tiny default, CPU
    accelerate launch examples/train_dapo.py --dynamic_sampling true   # the toy with dynamic sampling
    accelerate launch --config_file configs/accelerate/multi_gpu.yaml examples/train_dapo.py \
        --config configs/dapo.yaml --model_name_or_path Qwen/Qwen2.5-7B \
        --dataset_name open-r1/DAPO-Math-17k-Processed --reward_funcs accuracy_reward

The recipe (configs/dapo.yaml) holds the paper's settings: clip 0.2 / 0.28, token-mean, 16 samples per prompt,
dynamic sampling on, overlong buffer 4096 of 20480 tokens. Every TRL flag works (see `trl_ext/scripts/grpo.py`); the
DAPO ones are `--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`, `--dynamic_sampling`,
`--dynamic_sampling_max_rounds`, `--overlong_buffer`, `--overlong_penalty_factor`, `--advantage_epsilon`,
`--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("dapo")
