"""Train with DAPO (Yu et al. 2025, arXiv 2503.14476: decoupled clip, token-level loss, dynamic sampling, overlong
reward shaping) through trl_ext.DAPOTrainer.

    accelerate launch examples/train_dapo.py                     # offline tiny default, CPU: the paper's DAPO
    accelerate launch --config_file configs/accelerate/multi_gpu.yaml examples/train_dapo.py \
        --config configs/dapo.yaml --model_name_or_path Qwen/Qwen2.5-7B \
        --dataset_name open-r1/DAPO-Math-17k-Processed --reward_funcs accuracy_reward

DAPOConfig's defaults are the paper's four techniques (`trl-ext list dapo`): clip 0.2 / 0.28, token-mean, dynamic
sampling, an overlong buffer of a fifth of max_completion_length; the recipe (configs/dapo.yaml) adds the paper's
scale (16 samples per prompt, 20480 tokens, learning rate 1e-6). When the toy's groups all agree (the policy solves
every prompt), dynamic sampling trains the batch it could fill at `--dynamic_sampling_max_rounds` and warns once
(`--dynamic_sampling_at_cap raise` stops instead). Every TRL flag works (see `trl_ext/scripts/grpo.py`); the DAPO ones
are `--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`, `--dynamic_sampling`,
`--dynamic_sampling_max_rounds`, `--dynamic_sampling_at_cap`, `--overlong_buffer`, `--overlong_penalty_factor`,
`--advantage_epsilon`, `--std_threshold`, `--std_cal_level`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("dapo")
