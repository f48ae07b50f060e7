"""Train with DPO (Rafailov et al. 2023, arXiv 2305.18290) through trl_ext.DPOTrainer: TRL's DPOTrainer with the
ported per-pair `dpo` loss (label smoothing = conservative DPO) plus Trinity-RFT's KL term.

    accelerate launch examples/train_dpo.py           # offline tiny default: the toy task's embedded preference pairs
    accelerate launch examples/train_dpo.py --config configs/dpo.yaml --model_name_or_path <model> \
        --dataset_name trl-lib/ultrafeedback_binarized

Every `trl dpo` flag works (see `trl_ext/scripts/dpo.py`); the loss's are `--beta`, `--label_smoothing`,
`--kl_loss_fn` and `--kl_coef`.
"""

from trl_ext.scripts.dpo import main

if __name__ == "__main__":
    main()
