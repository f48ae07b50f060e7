"""Train with SDFT, self-distillation fine-tuning (Shenfeld et al. 2026, arXiv 2601.19897), through
trl_ext.SDFTTrainer: TRL's experimental SDFTTrainer (the model, prompted with a demonstration, teaches itself without
it along its own completions) with the ported self-distillation loss.

    accelerate launch examples/train_sdft.py           # offline tiny default: the toy task with its demonstrations
    accelerate launch examples/train_sdft.py --config configs/sdft.yaml --model_name_or_path <model> \
        --dataset_name <rows with a prompt and a privileged_context (the demonstration)>

Every flag of TRL's `SDFTConfig` works (see `trl_ext/scripts/sdft.py`); the method's are `--distillation_mode`,
`--distillation_alpha`, `--distillation_topk`, `--teacher_model_kind` and `--teacher_prompt_template`.
"""

from trl_ext.scripts.sdft import main

if __name__ == "__main__":
    main()
