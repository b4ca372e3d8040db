"""Turn a benchmark prompt into model input: the chat template for instruct models, raw otherwise.

In the chat format the prompt goes inside a ```python fence byte for byte (leading and trailing
newlines and whitespace-only lines included), so a variant that differs from the nominal prompt
only in whitespace (ReCode's `new_line_aftercode`, `new_lines`, ...) still reaches the model
different; a template that trims the message only trims around the fence. MBXP's prompts (Go,
C++, Java, JavaScript) get their own language's name and fence.
"""

from __future__ import annotations

import re

from quench.models.loading import LoadedModel

CHAT_INSTRUCTION = "Complete the following Python code. Answer with the whole function in one ```python code block.\n\n"
# MBXP's languages, told apart by how their prompts begin: (name in the instruction, fence tag).
PROMPT_LANGUAGES = (
    ("package main", ("Go", "go")),
    ("#include", ("C++", "cpp")),
    ("import java.", ("Java", "java")),
)


def prompt_language(prompt: str) -> tuple[str, str]:
    """(language name, fence tag) of a benchmark prompt: MBXP's by its first line, else Python."""
    first = prompt.lstrip().split("\n", 1)[0]
    for start, language in PROMPT_LANGUAGES:
        if first.startswith(start):
            return language
    if first.startswith("/**") and re.search(r"^function ", prompt, re.MULTILINE):
        return "JavaScript", "javascript"
    return "Python", "python"


def chat_instruction(prompt: str) -> str:
    name, tag = prompt_language(prompt)
    return CHAT_INSTRUCTION.replace("Python", name).replace("```python", f"```{tag}")


def fenced(prompt: str) -> str:
    """The prompt in a fence of its language (```python, ```go, ...); the closing fence starts a line of its own."""
    tag = prompt_language(prompt)[1]
    return f"```{tag}\n{prompt}{'' if prompt.endswith(chr(10)) else chr(10)}```"


def format_prompt(loaded: LoadedModel, prompt: str) -> str:
    """The text the model continues: a chat turn asking for the code, or the prompt itself."""
    if loaded.prompt_format == "completion":
        return prompt
    messages = [{"role": "user", "content": chat_instruction(prompt) + fenced(prompt)}]
    return loaded.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompt(loaded: LoadedModel, prompt: str) -> tuple[int, ...]:
    """Token ids of the formatted prompt (the chat template already holds any BOS token)."""
    text = format_prompt(loaded, prompt)
    add_special = loaded.prompt_format == "completion"
    return tuple(loaded.tokenizer(text, add_special_tokens=add_special)["input_ids"])
