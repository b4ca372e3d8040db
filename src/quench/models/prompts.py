"""Turn a benchmark prompt into model input: the chat template for instruct models, raw otherwise."""

from __future__ import annotations

from quench.models.loading import LoadedModel

CHAT_INSTRUCTION = (
    "Complete the following Python code. Answer with the whole function in one ```python code block.\n\n"
    "```python\n{prompt}\n```"
)


def format_prompt(loaded: LoadedModel, prompt: str) -> str:
    """The text the model continues: a chat turn asking for the code, or the prompt itself."""
    if loaded.prompt_format == "completion":
        return prompt
    messages = [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=prompt.strip("\n"))}]
    return loaded.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompt(loaded: LoadedModel, prompt: str) -> tuple[int, ...]:
    """Token ids of the formatted prompt (the chat template already holds any BOS token)."""
    text = format_prompt(loaded, prompt)
    add_special = loaded.prompt_format == "completion"
    return tuple(loaded.tokenizer(text, add_special_tokens=add_special)["input_ids"])
