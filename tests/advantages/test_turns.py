"""Model turns from TRL's multi-turn masks (`completion_mask * tool_mask`), and per-turn values on their tokens."""

from __future__ import annotations

import pytest
import torch

from trl_ext.advantages import get_advantage_fn
from trl_ext.trainers.core.turns import on_turn_tokens, segment_turns, turn_rows


def _masks(rows: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row a string over the completion: `m` model token, `t` tool-output token, `.` masked (after EOS or a
    truncated completion); the tool mask is 0 on `t` only, as TRL's (1 on padding)."""
    completion = torch.tensor([[c != "." for c in row] for row in rows], dtype=torch.long)
    tool = torch.tensor([[c != "t" for c in row] for row in rows], dtype=torch.long)
    return completion, tool


def test_turns_are_the_runs_of_model_tokens():
    completion, tool = _masks(
        [
            "mmmttmmtttmm",  # three turns, the last one cut by the length limit
            "mmmmmm......",  # one turn, then EOS
            "mmttttttttt.",  # a turn, then a tool output after which the length limit left the model nothing
            "............",  # masked out (mask_truncated_completions)
            "mtmtmtmtmtmt",  # six one-token turns
        ]
    )
    turns = segment_turns(completion, tool)
    assert turns.count.tolist() == [3, 1, 1, 0, 6]
    assert turns.index[0].tolist() == [0, 0, 0, -1, -1, 1, 1, -1, -1, -1, 2, 2]
    assert turns.index[1].tolist() == [0] * 6 + [-1] * 6
    assert turns.index[3].tolist() == [-1] * 12
    assert turns.index[4].tolist() == [0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1]
    assert turns.offsets.tolist() == [0, 3, 4, 5, 5]
    assert turn_rows(turns).tolist() == [0, 0, 0, 1, 2, 4, 4, 4, 4, 4, 4]


def test_without_a_tool_mask_each_completion_is_one_turn():
    completion, _ = _masks(["mmm..", "mmmmm", "....."])
    assert segment_turns(completion).count.tolist() == [1, 1, 0]


def test_per_turn_values_go_on_their_tokens_and_nowhere_else():
    completion, tool = _masks(["mmttm.", "......", "mtmtmm"])
    turns = segment_turns(completion, tool)
    values = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0])  # completion 0: 2 turns, completion 2: 3 turns
    on_tokens = on_turn_tokens(values, turns)
    assert on_tokens.tolist() == [
        [10.0, 10.0, 0.0, 0.0, 20.0, 0.0],
        [0.0] * 6,
        [30.0, 0.0, 40.0, 0.0, 50.0, 50.0],
    ]
    with pytest.raises(ValueError, match=r"expected one value per turn \(5\), got shape \(4,\)"):
        on_turn_tokens(values[:4], turns)
    empty = segment_turns(*_masks(["...", "..."]))
    assert on_turn_tokens(torch.zeros(0), empty).tolist() == [[0.0] * 3] * 2


def test_step_wise_grpo_on_the_turns_of_a_batch():
    """The reference's per-step layout from TRL's masks: each turn a row, its run the completion; step_wise_grpo's
    run advantage (the run's reward, here given on every step as the reference's step-wise workflows copy it) lands on
    every turn's tokens and never on tool outputs."""
    completion, tool = _masks(["mmttm", "mmmmm", "mtmtm", "m...."])
    turns = segment_turns(completion, tool)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])  # per completion; group: completions 0-1 and 2-3
    runs = turn_rows(turns)
    result = get_advantage_fn("step_wise_grpo").compute(rewards[runs], (runs // 2).tolist(), run_ids=runs.tolist())
    on_tokens = on_turn_tokens(result.advantages, turns)
    a = (1.0 - 0.5) / (torch.tensor([1.0, 0.0]).std() + 1e-6)
    assert torch.allclose(on_tokens[0], torch.stack([a, a, torch.tensor(0.0), torch.tensor(0.0), a]))
    assert torch.allclose(on_tokens[1], -a.expand(5))
    assert (on_tokens[2][[1, 3]] == 0).all() and torch.allclose(on_tokens[2][[0, 2, 4]], a.expand(3))


def test_a_tool_mask_of_another_shape_is_refused():
    completion, tool = _masks(["mmtm", "mmmm"])
    with pytest.raises(ValueError, match=r"tool_mask has shape \(2, 3\) but completion_mask \(2, 4\)"):
        segment_turns(completion, tool[:, :3])
