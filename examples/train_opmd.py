"""Train with OPMD (online policy mirror descent, Trinity-RFT) through trl_ext.OPMDTrainer.

    accelerate launch examples/train_opmd.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_opmd.py --config configs/opmd.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the opmd-specific ones are `--tau`, `--loss_agg_mode`,
`--opmd_baseline`, `--advantage_tau`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("opmd")
