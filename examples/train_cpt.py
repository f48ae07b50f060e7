"""Continued pretraining through trl_ext.CPTTrainer (Trinity-RFT's CPT): TRL's SFTTrainer on plain text, the loss on
every token of the `--dataset_text_field` column (default `text`), normalized over the optimizer window.

    accelerate launch examples/train_cpt.py           # offline tiny default: the toy task as plain text
    accelerate launch examples/train_cpt.py --config configs/cpt.yaml --model_name_or_path <model> \
        --dataset_name <plain-text dataset> --dataset_text_field text

Every `trl sft` flag works (see `trl_ext/scripts/cpt.py`); the loss's are `--sft_loss_fn`, `--cutoff_prob` and
`--loss_agg_mode`. A dataset without the text column, or with prompt-completion or chat columns, is an error before
the model loads.
"""

from trl_ext.scripts.cpt import main

if __name__ == "__main__":
    main()
