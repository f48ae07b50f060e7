"""IW-OPD: TRL's experimental `IWOPDTrainer` (importance-weighted on-policy distillation) with trl_ext's loss port."""
