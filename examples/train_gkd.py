"""Distill a teacher with GKD (Agarwal et al. 2024, arXiv 2306.13649) through trl_ext.GKDTrainer: TRL's experimental
GKDTrainer (a share `lmbda` of the batches completed by the student itself) with the ported generalized JSD loss.

    accelerate launch examples/train_gkd.py           # offline tiny default: the toy teacher into the toy model
    accelerate launch examples/train_gkd.py --config configs/gkd.yaml --model_name_or_path <student> \
        --teacher_model_name_or_path <teacher with the same vocabulary> --dataset_name <chat messages dataset>

Every flag of TRL's GKD example works (see `trl_ext/scripts/gkd.py`); the method's are `--lmbda`, `--beta`,
`--temperature`, `--max_new_tokens` and `--seq_kd`.
"""

from trl_ext.scripts.gkd import main

if __name__ == "__main__":
    main()
