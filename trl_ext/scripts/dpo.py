"""Train trl_ext's DPO trainer with TRL's command-line conventions (the code behind `examples/train_dpo.py`).

    accelerate launch examples/train_dpo.py                                    # the offline tiny default
    accelerate launch examples/train_dpo.py --config configs/dpo.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name trl-lib/ultrafeedback_binarized \\
        --use_peft --lora_r 32 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.DPOConfig` (every `trl.DPOConfig` flag plus `--kl_loss_fn` and `--kl_coef`), `trl.ModelConfig` and
`trl.DatasetMixtureConfig`, as `trl dpo` does; `--config recipe.yaml` sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's preference pairs (`toy_preference_dataset`: the prompt's letter repeated is
chosen, another letter rejected), evaluating on held-out pairs, with `trl_ext.toy.DPO_TRAINING` as defaults. Without a
CUDA device, `use_cpu=True` and `bf16=False` are the defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config

from .. import toy
from ..toy import DPO_TRAINING
from ..trainers.dpo_config import DPOConfig
from ._common import load_user_dataset, set_defaults, set_model_init_kwargs, train_and_finish


def make_parser(argv: Sequence[str]) -> TrlParser:
    parser = TrlParser((ScriptArguments, DPOConfig, ModelConfig, DatasetMixtureConfig))
    set_defaults(parser, argv, "outputs/dpo-tiny", DPO_TRAINING)
    return parser


def main(argv: Sequence[str] | None = None):
    """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer."""
    from ..trainers.dpo_trainer import DPOTrainer

    argv = list(sys.argv[1:] if argv is None else argv)
    script_args, training_args, model_args, dataset_args = make_parser(argv).parse_args_and_config(argv)
    model = model_args.model_name_or_path
    dataset = load_user_dataset(script_args, dataset_args)
    if dataset is None:
        dataset = {
            script_args.dataset_train_split: toy.toy_preference_dataset(),
            script_args.dataset_test_split: toy.toy_preference_dataset(64, seed=99),
        }
    model = model or toy.tiny_model_path()
    set_model_init_kwargs(training_args, model_args)
    trainer = DPOTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    return train_and_finish(trainer, "dpo", training_args, script_args)
