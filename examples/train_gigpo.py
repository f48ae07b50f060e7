"""Train a tool-using agent with GiGPO (Feng et al. 2025, arXiv 2505.10978) through trl_ext.GiGPOTrainer, on TRL's
own multi-turn rollouts.

    accelerate launch examples/train_gigpo.py                    # offline toy lookup agent, CPU, < 3 minutes
    accelerate launch examples/train_gigpo.py --config configs/gigpo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --environment_factory my_envs.MyEnvironment --reward_funcs my_rewards.score \
        [--use_peft --lora_r 16] [--report_to wandb]

Each model turn gets the episode's advantage (its return against the group's) plus ω × a step-level advantage
(its return-to-go against the turns of the batch that start from the same state). The state is the environment's
`state_key` attribute when it has one, else the text the model saw before the turn (the prompt and the tool
outputs so far); an environment may also record turn rewards (`turn_rewards`). The gigpo-specific flags: `--omega`,
`--gamma`, `--fnorm`, `--advantage_epsilon`, `--turns_as_samples`, and the PPO loss's `--clip_range`,
`--clip_ratio_c`, `--loss_agg_mode`. The logged `advantage/gigpo/anchor_group_hit_ratio` is the share of anchor
states that more than one turn started from.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("gigpo")
