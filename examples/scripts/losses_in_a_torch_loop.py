"""trl_ext's loss library in a plain PyTorch loop, without TRL: a causal LM samples a group of completions per prompt,
a reward function scores them, `get_advantage_fn("grpo")` turns the rewards into advantages, `get_policy_loss("sapo")`
(plus, optionally, a `get_kl_fn` term to the frozen initial model) gives the loss, and an optimizer steps.

    # offline: trl_ext's tiny toy LM, CPU, ~10 s: the printed reward rises from ~0.1 to ~0.9 in 30 steps (on a
    # busy machine set OMP_NUM_THREADS=1: a model this small runs as fast on one thread)
    python examples/scripts/losses_in_a_torch_loop.py

    # other components, by name; a real model
    python examples/scripts/losses_in_a_torch_loop.py --policy_loss cispo --advantage rloo --kl_coef 0.01
    python examples/scripts/losses_in_a_torch_loop.py --model_name_or_path Qwen/Qwen2.5-0.5B --learning_rate 1e-6

The losses are pure torch: they take per-token log-probs `[B, T]` (the current policy's, with gradients, and the
sampling policy's), a mask of the completion tokens and one advantage per completion, and return the loss and a dict
of metrics. The task: "Repeat the letter c:" -> " c c c" (reward 1, else 0); the default model, trl_ext's toy
(`trl_ext.toy.tiny_model_path()`), repeats some letter but not the prompt's, so its reward starts at ~1/8.
"""

import argparse
import copy
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_ext.advantages import get_advantage_fn
from trl_ext.losses import get_kl_fn, get_policy_loss
from trl_ext.toy import tiny_model_path


def repeat_reward(completion: str, letter: str) -> float:
    chars = completion.replace(" ", "")
    return float(bool(chars) and set(chars) == {letter})


def completion_logprobs(model, sequences, attention_mask, prompt_length):
    """Log-probs `[B, T]` of the completion tokens (the tokens after `prompt_length`) under `model`."""
    logits = model(input_ids=sequences, attention_mask=attention_mask).logits[:, prompt_length - 1 : -1]
    tokens = sequences[:, prompt_length:]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def main(argv=None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_name_or_path", help="default: trl_ext's offline toy LM")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts_per_step", type=int, default=16)
    parser.add_argument("--num_generations", type=int, default=8, help="completions per prompt: a group")
    parser.add_argument("--max_new_tokens", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--updates_per_batch", type=int, default=2, help="optimizer steps on each sampled batch")
    parser.add_argument("--policy_loss", default="sapo", help="a name in trl_ext.losses.POLICY_LOSSES")
    parser.add_argument("--advantage", default="grpo", help="a group estimator in trl_ext.advantages.ADVANTAGE_FNS")
    parser.add_argument("--kl_coef", type=float, default=0.0, help="> 0: add a k3 KL term to the initial model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    # The components, by name; each checks its arguments here (a bad name or value is a ValueError naming it).
    advantage_fn = get_advantage_fn(args.advantage)  # e.g. get_advantage_fn("grpo", epsilon=1e-6)
    policy_loss = get_policy_loss(args.policy_loss)  # e.g. get_policy_loss("sapo", tau_pos=1.0, tau_neg=1.05)
    kl_fn = get_kl_fn("k3", kl_coef=args.kl_coef) if args.kl_coef > 0 else None

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    path = args.model_name_or_path or tiny_model_path()  # the toy is built (~5 s) and cached on first use
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path).to(device)
    reference = copy.deepcopy(model).eval().requires_grad_(False) if kl_fn else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    eos = model.generation_config.eos_token_id or tokenizer.eos_token_id
    eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos], device=device)

    mean_rewards = []
    for step in range(args.steps):
        # 1. Sample a group of completions for each prompt, and score them.
        prompt_letters = [rng.choice("abcdefgh") for _ in range(args.prompts_per_step)]
        letters = [c for c in prompt_letters for _ in range(args.num_generations)]  # each prompt num_generations times
        batch = tokenizer([f"Repeat the letter {c}:" for c in letters], return_tensors="pt", padding=True).to(device)
        prompt_length = batch["input_ids"].shape[1]
        model.eval()
        with torch.no_grad():
            sequences = model.generate(
                **batch, do_sample=True, max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id
            )
        completions = sequences[:, prompt_length:]
        # the loss's mask: each completion's tokens up to and including its first eos
        is_eos = torch.isin(completions, eos_ids).long()
        action_mask = (is_eos.cumsum(1) - is_eos) == 0
        attention_mask = torch.cat([batch["attention_mask"], action_mask.long()], dim=1)
        texts = tokenizer.batch_decode(completions.masked_fill(~action_mask, eos_ids[0]), skip_special_tokens=True)
        rewards = torch.tensor([repeat_reward(text, c) for text, c in zip(texts, letters, strict=True)])
        mean_rewards.append(rewards.mean().item())

        # 2. One advantage per completion, against its group (the completions of the same prompt).
        group_ids = torch.arange(args.prompts_per_step).repeat_interleave(args.num_generations)
        advantages = advantage_fn(rewards, group_ids).to(device)

        # 3. The sampling policy's log-probs (`old_logprob`, the ratio's denominator) and the reference's for the KL.
        with torch.no_grad():
            old_logprob = completion_logprobs(model, sequences, attention_mask, prompt_length)
            ref_logprob = completion_logprobs(reference, sequences, attention_mask, prompt_length) if kl_fn else None

        # 4. Optimizer steps on the batch: from the second on, the policy has moved and the loss's ratio is not 1.
        model.train()
        for _ in range(args.updates_per_batch):
            logprob = completion_logprobs(model, sequences, attention_mask, prompt_length)
            loss, metrics = policy_loss(
                logprob=logprob, old_logprob=old_logprob, action_mask=action_mask, advantages=advantages
            )
            if kl_fn is not None:  # kl_coef x agg(KL), aggregated over the same mask
                kl_loss, kl_metrics = kl_fn.calculate_kl_loss(logprob, ref_logprob, response_mask=action_mask)
                loss, metrics = loss + kl_loss, {**metrics, **kl_metrics}
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)  # a tight clip keeps the tiny toy's format
            optimizer.step()
            optimizer.zero_grad()
        shown = "  ".join(f"{name} {float(value):.3f}" for name, value in metrics.items())
        print(f"step {step:3d}  reward {mean_rewards[-1]:.3f}  {shown}")
    return mean_rewards


if __name__ == "__main__":
    main()
