"""Train a tool-using agent with multi-step GRPO (Trinity-RFT's `multi_step_grpo`) through
trl_ext.MultiStepGRPOTrainer, on TRL's own multi-turn rollouts.

    accelerate launch examples/train_multi_step_grpo.py          # offline toy lookup agent, CPU, < 3 minutes
    accelerate launch examples/train_multi_step_grpo.py --config configs/multi_step_grpo.yaml \
        --model_name_or_path <model> --dataset_name <dataset> --environment_factory my_envs.MyEnvironment \
        --reward_funcs my_rewards.score [--use_peft --lora_r 16] [--report_to wandb]

TRL runs the tool loop (`--environment_factory`: one environment per rollout, its public methods the tools,
`--max_tool_calling_iterations`); trl_ext segments each episode into the model's turns and puts the episode's
group-normalized advantage on every turn (tool outputs get none). The multi_step_grpo-specific flags:
`--enable_step_norm` (÷ the episode's number of turns), `--std_cal_level`, `--std_threshold`,
`--advantage_epsilon`, `--turns_as_samples` (each turn one sample of the `seq-mean-*` aggregations), and the PPO
loss's `--clip_range`, `--clip_ratio_c`, `--loss_agg_mode`. The logged `turns/per_completion` is the mean number of
model turns per episode.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("multi_step_grpo")
