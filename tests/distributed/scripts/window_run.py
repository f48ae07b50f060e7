"""Train two optimizer steps on fixed completions and save the parameter update (for test_window_normalization).

Run as `python window_run.py OUT --batch B --accumulation G`, under `torchrun --nproc_per_node 2`, or under
`accelerate launch --config_file <config> --num_processes 2` (DeepSpeed ZeRO-2/3: test_distributed_engines). The
completions come from a deterministic `rollout_func`, so every split of the same 16-sample window sees the same
prompts, completions and rewards; with SGD (no clipping) the update is −lr × the window's gradient. Two steps, so
that the second one has a non-zero KL to the reference.

MIX's reference weighting (test_mix_reference_weighting): the algorithm key `mix_chord:reference-sapo` trains
MIX-CHORD with its batch-geometry arguments set and `sapo` on the rollout rows. That weighting is per micro-batch,
so `--fixed-micro-batches` makes the micro-batches the same in every split (each process's rollouts and expert rows
interleaved instead of TRL's random shuffle), and `--no-process-scale` is the control that drops the number of
processes from the trainer's scale of that loss.
"""

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

import trl_ext  # noqa: E402
from trl_ext.losses import get_policy_loss  # noqa: E402
from trl_ext.losses.aggregation import LOSS_AGG_MODES  # noqa: E402

GROUP = 4
PROMPTS = 4  # 16 completions per optimizer window
MULTI_TURN = ("multi_step_grpo", "gigpo")  # trained on completions with two model turns


def kl_and_entropy(spec) -> dict:
    """A KL term (none without a reference model) and an entropy bonus: the record's, `k2` / `default` where the
    record has none."""
    entropy = "default" if spec.entropy_loss_fn == "none" else spec.entropy_loss_fn
    terms = {"entropy_coef": 0.01, "entropy_loss_fn": entropy}
    if spec.use_reference:
        terms.update(beta=0.1, kl_loss_fn="k2" if spec.kl_loss_fn == "none" else spec.kl_loss_fn)
    return terms


def completion_for(prompt_index: int, k: int, eos: int) -> list[int]:
    length = 2 + (5 * prompt_index + 3 * k) % 7  # 2..8 tokens: uneven lengths make the modes differ
    ids = [10 + (prompt_index * 31 + k * 17 + 7 * t) % 200 for t in range(length)]
    return [*ids, eos] if (prompt_index + k) % 2 else ids  # half terminated, half truncated


def make_rollout(eos: int, multi_turn: bool = False):
    """The fixed completions; `multi_turn`: most have two model turns around a 2-token tool output (`env_mask` 0),
    prompts 0 and 2 (1 and 3) have the same tokens and the tool outputs repeat, so turns of different groups, on
    different processes, start from the same text (GiGPO's anchor states are gathered over the batch)."""

    def rollout(prompts, trainer):
        start = trainer.accelerator.process_index * len(prompts)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        masks = []
        for i, prompt in enumerate(prompts):
            index = int(prompt.split()[-1])
            k = (start + i) % GROUP
            ids = completion_for(index, k, eos)
            mask = [1] * len(ids)
            if multi_turn and len(ids) >= 5 and k != 3:
                ids[2:4] = [200 + index % 2, 210 + k % 2]
                mask[2:4] = [0, 0]
            key = index % 2 if multi_turn else index
            out["prompt_ids"].append([20 + key, 30 + key, 40 + key])  # equal lengths: no left padding
            out["completion_ids"].append(ids)
            out["logprobs"].append([0.0] * len(ids))
            masks.append(mask)
        if multi_turn:
            out["env_mask"] = masks
        return out

    return rollout


def expert_dataset(tokenizer) -> Dataset:
    """Eight demonstrations of uneven lengths whose prompts are 3 tokens, like the rollouts' (no left padding, so
    the logits do not depend on how rows are grouped into padded batches)."""
    words = [w for w in ("a b c", "d e f", "g h a", "b c d", "e f g", "h a b", "c d e", "f g h")]
    assert all(len(tokenizer(w)["input_ids"]) == 3 for w in words), [tokenizer(w)["input_ids"] for w in words]
    completions = [" " + " ".join(w.split()[0] for _ in range(1 + i % 6)) for i, w in enumerate(words)]
    return Dataset.from_dict({"prompt": words, "completion": completions})


def reward(completion_ids, **kwargs):
    return [((sum(ids) * 7919) % 101) / 100.0 for ids in completion_ids]


def reward_uniform_for_prompt_1(prompts, completion_ids, **kwargs):
    """`reward`, except that prompt 1's completions all get 0.5: dynamic sampling drops its group."""
    scores = reward(completion_ids)
    return [0.5 if prompt.split()[-1] == "1" else score for prompt, score in zip(prompts, scores, strict=True)]


def use_local_normalization() -> None:
    """Per-micro-batch means divided by the accumulation steps (TRL's `grpo` / `bnpo` convention)."""
    from trl_ext.trainers.grpo.trainer import GRPOFamilyTrainer

    compute_loss = GRPOFamilyTrainer._compute_loss

    def local(self, model, inputs):
        inputs = {k: v for k, v in inputs.items() if not k.startswith("global_valid_")}
        return compute_loss(self, model, inputs) / self.current_gradient_accumulation_steps

    GRPOFamilyTrainer._compute_loss = local
    GRPOFamilyTrainer._window_kwargs = lambda self, inputs, mode: {}


def fix_micro_batches() -> None:
    """Replace TRL's random shuffle of each process's generation batch (its rollouts, then its expert rows) by
    interleaving its two halves: rollout, expert, rollout, ... With half the rows expert rows, micro-batch j of
    process p then holds the same rows whatever the split (1 process × 4 accumulation steps or 2 × 2)."""
    import trl.trainer.grpo_trainer as trl_grpo

    def interleave(batch: dict) -> dict:
        size = len(next(v for v in batch.values() if v is not None))
        half = size // 2
        order = torch.stack([torch.arange(half), torch.arange(half, size)], dim=1).flatten()

        def permute(v):
            if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
                return v
            return v[order] if isinstance(v, torch.Tensor) else [v[i] for i in order]

        return {key: permute(value) for key, value in batch.items()}

    trl_grpo.shuffle_sequence_dict = interleave


def drop_process_scale() -> None:
    """Control: MIX's reference weighting scaled by 1 / accumulation steps only, without the number of processes."""
    from trl_ext.trainers.mix.trainer import MIXFamilyTrainer

    policy_loss = MIXFamilyTrainer._policy_loss

    def without(self, mode, **inputs):
        loss, metrics = policy_loss(self, mode, **inputs)
        if mode == "eval" or not self.args.reference_weighting:
            return loss, metrics
        n, share = self.accelerator.num_processes, self.policy_loss_fn.is_window_share
        return loss * n, {k: v * n if share(k) else v for k, v in metrics.items()}

    MIXFamilyTrainer._policy_loss = without


# MIX-CHORD's reference weighting (`mix_chord:reference-<rollout loss>`): each part's n·w per micro-batch, w = (16 // 4)
# accumulation steps of the reference / 8 rows of each kind (all processes: ngpus_trainer is the reference's, 1)
REFERENCE_GEOMETRY = {
    "ppo_mini_batch_size": 16,
    "ppo_micro_batch_size_per_gpu": 4,
    "train_batch_size_usual": 8,
    "train_batch_size_expert": 8,
}
MIX_SCHEDULE = {"mu_peak": 0.6, "mu_valley": 0.2, "mu_decay_steps": 2}  # mu 0.6 then 0.4


def parameters(model) -> dict[str, torch.Tensor]:
    """Copies of the model's full parameters by name; under DeepSpeed ZeRO-3 (each process holds a shard) they are
    gathered first, on every process (a collective)."""
    if not any(hasattr(p, "ds_id") for p in model.parameters()):
        return {n: p.detach().clone() for n, p in model.named_parameters()}
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        return {n: p.detach().clone() for n, p in model.named_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--accumulation", type=int, required=True)
    parser.add_argument("--algorithms", default="grpo:all")
    parser.add_argument("--teacher", help="on_policy_distill's teacher (a model with the same tokenizer)")
    parser.add_argument(
        "--local", action="store_true", help="control: normalize each micro-batch by itself, then divide by G"
    )
    parser.add_argument(
        "--fixed-micro-batches", action="store_true", help="interleave rollouts and expert rows instead of shuffling"
    )
    parser.add_argument(
        "--no-process-scale", action="store_true", help="control: MIX's reference weighting without the process count"
    )
    args = parser.parse_args()
    if args.local:
        use_local_normalization()
    if args.fixed_micro_batches:
        fix_micro_batches()
    if args.no_process_scale:
        drop_process_scale()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dataset = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(PROMPTS)]})
    results = {}
    # "grpo:all" runs every loss_agg_mode, "mix_chord:token-mean+seq-mean-token-mean" those two, "raft" the default,
    # "grpo:duplicate" std_threshold with duplicate_experiences (rows copied across processes), "grpo:dynamic" DAPO's
    # dynamic sampling and overlong shaping,
    # "mix_chord:reference-sapo+reference-ppo" the reference's weighting with sapo / ppo on the rollout rows
    for entry in args.algorithms.split(","):
        algorithm, _, which = entry.partition(":")
        spec = trl_ext.get_algorithm(algorithm)
        modes = LOSS_AGG_MODES if which == "all" else which.split("+") if which else ("default",)
        for mode in modes:
            extra = {} if mode == "default" else {"loss_agg_mode": mode}
            if mode == "duplicate":  # the groups of prompts 1 and 2 (reward std 0.17, 0.23) become copies of others
                extra = {"std_threshold": 0.25, "duplicate_experiences": True}
            if mode == "dynamic":  # prompt 1's uniform group replaced by prompt 0's from a second round, moved
                # across processes; plus DAPO's length penalty over the last 4 of 9 tokens
                extra = {"dynamic_sampling": True, "overlong_buffer": 4}
            if mode == "dense":  # the teacher's top-8 JSD next to the reward term (ZeRO-3: both models partitioned)
                extra = {"teacher_top_k": 8, "jsd_beta": 0.5}
            if mode == "shared":  # critic PPO's value head on the policy: the policy's update holds the value loss's
                extra = {"shared_backbone": True, "vf_coef": 0.5}
            elif algorithm == "ppo":  # the critic's AdamW at a small rate: its values stay close across splits
                extra["critic_learning_rate"] = 1e-3
            if mode == "turns":  # each model turn a sample of the seq-mean aggregation
                extra = {"turns_as_samples": True, "loss_agg_mode": "seq-mean-token-mean"}
            rollout_loss = mode.removeprefix("reference-") if mode.startswith("reference-") else None
            if rollout_loss is not None:  # 2 iterations on each generation: the second step's ratios are not 1
                extra = {**REFERENCE_GEOMETRY, "num_iterations": 2}
                composes = "policy_loss_fn_args" in spec.config_class.__dataclass_fields__
                if composes:
                    extra["policy_loss_fn"] = rollout_loss
            mixing = {}
            if algorithm.startswith("mix"):  # half the window is expert rows; mu 0.6 then 0.4
                extra.update(**MIX_SCHEDULE, expert_data_ratio=0.5)
                mixing["expert_dataset"] = expert_dataset(tokenizer)
            if algorithm == "on_policy_distill":  # group baseline and reward term: both need the whole batch
                extra.update(reward_weight=0.5, **({} if mode == "dense" else {"distill_baseline": "group"}))
                mixing["teacher_model"] = args.teacher
            config = spec.config_class(
                output_dir=os.path.join(os.path.dirname(args.out), "run"),
                use_cpu=True,
                bf16=False,
                activation_checkpointing=False,
                per_device_train_batch_size=args.batch,
                gradient_accumulation_steps=args.accumulation,
                num_generations=GROUP,
                max_completion_length=9,
                max_steps=2,  # the second step has a non-zero KL to the reference
                optim="sgd",
                learning_rate=0.1,
                lr_scheduler_type="constant",
                max_grad_norm=0.0,
                **kl_and_entropy(spec),
                report_to="none",
                save_strategy="no",
                logging_steps=1,
                seed=0,
                shuffle_dataset=False,
                **extra,
            )
            trainer = spec.trainer_class(
                model=args.model,
                reward_funcs=reward_uniform_for_prompt_1 if mode == "dynamic" else reward,
                args=config,
                train_dataset=dataset,
                processing_class=tokenizer,
                rollout_func=make_rollout(tokenizer.eos_token_id, multi_turn=algorithm in MULTI_TURN),
                **mixing,
            )
            if rollout_loss is not None and not composes:  # until the config composes
                trainer.policy_loss_fn = get_policy_loss(
                    algorithm,
                    rollout_loss=get_policy_loss(rollout_loss),
                    **REFERENCE_GEOMETRY,
                    **MIX_SCHEDULE,
                )
            before = parameters(trainer.model)
            trainer.train()
            update = torch.cat([(p - before[n]).flatten() for n, p in parameters(trainer.model).items()])
            logs = trainer.state.log_history[:2]
            accelerator = trainer.accelerator
            engine = {  # what ran: test_distributed_engines checks that DeepSpeed was not silently bypassed
                "distributed_type": str(accelerator.distributed_type),
                "num_processes": accelerator.num_processes,
                "wrapped": type(trainer.model_wrapped).__name__,
                "zero_stage": getattr(trainer.model_wrapped, "zero_optimization_stage", lambda: None)(),
            }
            critic = getattr(trainer, "value_model", None)
            if critic is not None:  # critic PPO's value model: its own engine beside the policy's
                engine["critic"] = type(critic).__name__
                engine["critic_zero_stage"] = getattr(critic, "zero_optimization_stage", lambda: None)()
            results[f"{algorithm}/{mode}"] = {
                "update": update,
                "logs": logs,
                "engine": engine,
                "policy_loss": repr(trainer.policy_loss_fn),
                "reference_weighting": getattr(trainer.args, "reference_weighting", None),
            }
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(results, args.out)
    if torch.distributed.is_initialized():
        # Every rank reaches the teardown together, with a moment of the GIL released for the backends' worker
        # threads to finish their last collective (a rank exiting while a peer's threads still run aborted a fresh
        # ZeRO-3 run with "terminate called without an active exception"), then the group is destroyed explicitly.
        torch.distributed.barrier()
        time.sleep(0.2)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
