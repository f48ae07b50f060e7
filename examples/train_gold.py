"""Train with GOLD (General Online Logit Distillation; Universal Logit Distillation, Boizard et al. 2024, arXiv
2402.12030) through trl_ext.GOLDTrainer: TRL's experimental GOLDTrainer with the ported generalized JSD and ULD losses.

    accelerate launch examples/train_gold.py          # offline tiny default: the toy student, the toy teacher
    accelerate launch examples/train_gold.py --config configs/gold.yaml --model_name_or_path <student> \
        --teacher_model_name_or_path <teacher of any tokenizer> --dataset_name trl-lib/chatbot_arena_completions

Every flag of TRL's GOLDConfig works (see `trl_ext/scripts/gold.py`); the loss's are `--lmbda`, `--beta`,
`--use_uld_loss`, `--uld_use_hybrid_loss`, `--uld_token_merge_strategy` and the other `--uld_*` flags.
"""

from trl_ext.scripts.gold import main

if __name__ == "__main__":
    main()
