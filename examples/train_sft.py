"""Supervised fine-tuning through trl_ext.SFTTrainer: TRL's SFTTrainer (its data pipeline, packing, completion- and
assistant-only loss, PEFT) with Trinity-RFT's supervised losses, normalized over the optimizer window: `sft` (the
negative log-likelihood, TRL's `nll`), `sft_is` (DFT, arXiv 2508.05629, TRL's `dft`) or `sft_phi` (CHORD-φ, arXiv
2508.11408).

    accelerate launch examples/train_sft.py           # offline tiny default: the toy task's expert demonstrations
    accelerate launch examples/train_sft.py --config configs/sft.yaml --model_name_or_path <model> \
        --dataset_name trl-lib/Capybara

Every `trl sft` flag works (see `trl_ext/scripts/sft.py`); the loss's are `--sft_loss_fn`, `--cutoff_prob` and
`--loss_agg_mode` (TRL's `--loss_type nll|dft` selects `sft` / `sft_is`).
"""

from trl_ext.scripts.sft import main

if __name__ == "__main__":
    main()
