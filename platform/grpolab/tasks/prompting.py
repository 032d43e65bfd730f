"""Prompting: a task question -> the text the model is conditioned on.

``task.template`` must contain ``{prompt}`` (the question); ``task.system`` is an optional
system prompt. ``task.chat``:
- ``auto`` (default): the tokenizer's chat template when it has one, plain text otherwise;
- ``true``: the chat template, required (a tokenizer without one is an error);
- ``false``: plain text, ``system + "\\n\\n" + template`` (base models, the toy world).
Chat prompts are rendered with ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``
into text once, before training, so training and evaluation condition on identical strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpolab.errors import ConfigError

PLACEHOLDER = "{prompt}"
CHAT_MODES = ("auto", True, False)


@dataclass(frozen=True)
class Prompting:
    template: str = PLACEHOLDER
    system: str | None = None
    chat: str | bool = "auto"

    def __post_init__(self):
        if not isinstance(self.template, str) or PLACEHOLDER not in self.template:
            raise ConfigError(f"task.template: must be a string containing the placeholder {PLACEHOLDER}, "
                              f"got {self.template!r}")
        if self.system is not None and not isinstance(self.system, str):
            raise ConfigError(f"task.system: expected a string, got {self.system!r}")
        if self.chat not in CHAT_MODES:
            raise ConfigError(f"task.chat: expected auto, true or false, got {self.chat!r}")

    def user_text(self, question: str) -> str:
        # str.replace, not str.format: templates may hold LaTeX braces such as \boxed{}
        return self.template.replace(PLACEHOLDER, question)

    def uses_chat(self, tokenizer) -> bool:
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if self.chat is True and not has_template:
            raise ConfigError("task.chat: true, but the model's tokenizer has no chat template; set task.chat: false")
        return has_template if self.chat == "auto" else bool(self.chat)

    def render(self, question: str, tokenizer) -> str:
        user = self.user_text(question)
        if not self.uses_chat(tokenizer):
            return f"{self.system}\n\n{user}" if self.system else user
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
