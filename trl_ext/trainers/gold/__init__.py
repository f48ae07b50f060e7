"""The GOLD family: TRL's experimental GOLDTrainer (cross-tokenizer on-policy distillation) with trl_ext's losses."""
