"""Stop sequences of MBXP's languages on raw completions: the text before the first one is kept."""

from __future__ import annotations

import pytest

from quench.stopping import default_stop_sequences
from quench.stopping.criteria import SequenceMatcher

CASES = [
    ("mbjsp", "    return x;\n}\nconsole.log(f(1));\n", "    return x;\n}"),
    ("mbjsp", "    return x;\n}\n/**\n * Next problem\n */\n", "    return x;\n}"),
    ("mbjsp", "    return x;\n}\nmodule.exports = f;\n", "    return x;\n}"),
    ("mbgp", "\treturn x\n}\nfunc main() {\n}\n", "\treturn x\n}"),
    ("mbcpp", "    return x;\n}\nint main() {\n}\n", "    return x;\n}"),
    ("mbcpp", "    return x;\n}\n/**\n * another\n */\n", "    return x;\n}"),
    ("mbjp", "        return x;\n    }\n    public static void main(String[] a) {}\n}\n", "        return x;\n    }"),
    ("mbjp", "        int y = f(x);\n        return y;\n    }\n}\n", None),  # nothing to stop at
]


@pytest.mark.parametrize(("benchmark", "text", "kept"), CASES)
def test_stop_sequences_per_language(benchmark: str, text: str, kept: str | None) -> None:
    matcher = SequenceMatcher(default_stop_sequences(benchmark, "completion"))
    offset = matcher.feed(text)
    assert (None if offset is None else text[:offset]) == kept


def test_chat_answers_stop_at_the_closing_fence_in_every_language() -> None:
    assert {default_stop_sequences(b, "chat") for b in ("mbjsp", "mbgp", "mbcpp", "mbjp", "humaneval")} == {("\n```\n",)}
