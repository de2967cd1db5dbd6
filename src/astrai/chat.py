"""What a prompt is: one user turn as a string, or chat turns for a model's chat template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# chat turns are {"role": "system" | "user" | "assistant", "content": str}
Prompt = str | Sequence[Mapping[str, str]]
