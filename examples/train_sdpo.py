"""Train with SDPO, self-distillation policy optimization (Hübotter et al. 2026, arXiv 2601.20802), through
trl_ext.SDPOTrainer: TRL's experimental SDPOTrainer (a rollout the reward judges successful teaches its failed
siblings: the model reprompted with it scores them) with the ported objective.

    accelerate launch examples/train_sdpo.py           # offline tiny default: the toy task and its reward
    accelerate launch examples/train_sdpo.py --config configs/sdpo.yaml --model_name_or_path <model> \
        --dataset_name <prompts> --reward_funcs <reward function>

Every flag of TRL's `SDPOConfig` works (see `trl_ext/scripts/sdpo.py`); the method's are `--distillation_weight`,
`--distillation_mode`, `--success_reward_threshold`, `--teacher_model_kind` and the reprompt templates.
"""

from trl_ext.scripts.sdpo import main

if __name__ == "__main__":
    main()
