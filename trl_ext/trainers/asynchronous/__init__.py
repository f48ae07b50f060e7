"""The asynchronous family: TRL's experimental AsyncGRPOTrainer with any trl_ext loss and group estimator."""
