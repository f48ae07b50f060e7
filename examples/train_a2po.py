"""Train with A*-PO (Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage Regression",
arXiv 2505.20686) through trl_ext.A2POTrainer: TRL's experimental A2POTrainer with the ported `a2po` loss, normalized
over the optimizer window. Stage 1 estimates V*(x) from the reference's samples before training; stage 2 regresses
one completion per prompt onto the optimal advantage r - V*(x).

    accelerate launch examples/train_a2po.py          # offline tiny default: the toy task's prompts and reward
    accelerate launch examples/train_a2po.py --config configs/a2po.yaml --model_name_or_path <model> \
        --dataset_name <prompts with a verifiable answer> --reward_funcs accuracy_reward

Every flag of TRL's A2POConfig works (see `trl_ext/scripts/a2po.py`); the algorithm's are `--num_value_samples`,
`--beta1`, `--beta2` and `--filter_all_incorrect`.
"""

from trl_ext.scripts.a2po import main

if __name__ == "__main__":
    main()
