"""``Experience``: the contract between explorer, buffer and trainer (as verl's ``DataProto``).

One sampled response (or one SFT/DPO example) with what training needs. Explorer workflows
produce Experiences; buffers store them (as JSON rows); the trainer batches them into tensors.
Everything is plain Python so that an Experience crosses Ray, SQLite and JSONL without custom
serialisation; this module imports nothing of rft_core, so every side can import it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Experience:
    prompt_ids: list[int]
    response_ids: list[int]
    # Log-probs of the response tokens under the policy that sampled them (rollout engine).
    # Empty for SFT/DPO data, where the trainer computes what it needs.
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    # Sequence-level advantage, filled by the explorer for a group advantage function (grpo,
    # rloo) unless it runs over KL-penalized rewards (rloo with kl_penalty_fn: those need the
    # reference model, so the trainer computes them, as it does token-level ones, ppo/gae);
    # None: the trainer computes it (AlgorithmSettings.advantages_in_explorer decides).
    advantage: float | None = None
    # All responses sampled for one task in one explorer step share a group_id.
    group_id: str = ""
    # 1 = train on this response token, 0 = masked (e.g. tool output). Empty = all ones.
    action_mask: list[int] = field(default_factory=list)
    # Reward parts (accuracy, format_score, ...) logged as rollout/<name>/{mean,max,min}.
    metrics: dict[str, float] = field(default_factory=dict)
    # Model version (trainer step of the weights) that generated this experience.
    model_version: int = 0
    # Explorer step that produced it.
    explorer_step: int = 0
    prompt_text: str = ""
    response_text: str = ""
    truncated: bool = False
    # DPO: the rejected response of the pair (the chosen one is response_ids).
    rejected_ids: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Experience:
        known = {k: row[k] for k in cls.__dataclass_fields__ if k in row}
        return cls(**known)
