"""The GKD family: TRL's experimental GKDTrainer with trl_ext's port of its generalized JSD loss."""
