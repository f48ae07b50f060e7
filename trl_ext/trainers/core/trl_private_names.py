"""The private names of TRL's trainers (and of the `transformers.Trainer` they extend) that trl_ext overrides or
reads, each with the class that defines it in the installed TRL, and the adapter modules, the only ones that touch
them: the inventory a TRL upgrade is checked against (`tests/algorithms/test_trl_private_names.py`), rendered in
docs/design.md."""

TRL_PRIVATE_NAMES: dict[str, str] = {
    "_async_tool_dicts": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_calculate_rewards": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_compute_loss": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_generate": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_generate_and_score_completions": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_generate_single_turn": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_get_dataloader": "transformers.trainer.Trainer",
    "_get_num_items_in_batch": "transformers.trainer.Trainer",
    "_get_output_dir": "transformers.trainer.Trainer",
    "_get_per_token_logps_and_entropies": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_groups_before_resume": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_get_train_sampler": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_is_vlm": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_last_forward_time_s": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_load_optimizer_and_scheduler": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_logs": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_metrics": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_name": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_paper": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_prepare_inputs": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_rollout_dataset": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_save_checkpoint": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_set_signature_columns_if_needed": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_signature_columns": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_step": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_step_forward_s": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_step_forward_tokens": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_step_samples": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_step_seq_len_weighted": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_step_trained_tokens": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_sync_tool_dicts": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_sync_weight": "trl.experimental.async_grpo.async_grpo_trainer.AsyncGRPOTrainer",
    "_tokenize_prompts": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_tokenizer": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_total_train_tokens": "trl.trainer.grpo_trainer.GRPOTrainer",
    "_tp_size": "trl.trainer.dpo_trainer.DPOTrainer",
}
"""Each private name → the TRL (or transformers) class that defines it."""

REPLACED_TRL_FUNCTIONS: tuple[str, ...] = ("trl.experimental.async_grpo.async_grpo_trainer.get_peak_flops_per_device",)
"""The functions of TRL's modules that trl_ext replaces (by a wrapper that returns None where TRL's raises)."""

ADAPTER_MODULES: dict[str, str] = {
    "trainers/core/trl_adapter.py": "every trainer: TRL's metric lists and model card, the HF loop's window hook",
    "trainers/grpo/trl_adapter.py": "`trl.GRPOTrainer`: the GRPO family, MIX, distillation, critic PPO",
    "trainers/asynchronous/trainer.py": "`trl.experimental.async_grpo.AsyncGRPOTrainer`",
    "trainers/dpo/trainer.py": "`trl.DPOTrainer`",
    "trainers/sft/trainer.py": "`trl.SFTTrainer` (and CPT)",
}
"""The modules (under `trl_ext/`) that may touch TRL's private names: one per TRL trainer, and the shared one."""
