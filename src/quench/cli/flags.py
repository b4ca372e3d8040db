"""The flags the subcommands share: their definitions, help and defaults (the engine's and SamplingParams' own).

Reading them into settings is `settings.py`'s; building what they name (models, backends, sandbox pools) is
`builders.py`'s.
"""

from __future__ import annotations

import argparse

from quench.cli import remote, work_settings
from quench.engine import SamplingParams
from quench.engine.config import DRAFT_LENGTHS, DRAFTERS, KV_CACHES, MAX_LOOP_TOKENS, EngineConfig, drafting_defaults
from quench.execution import SandboxLimits
from quench.execution.limits import FACTOR as LIMIT_FACTOR
from quench.models import DEFAULT_PRESET
from quench.runs.samples import STOP_RULES

ENGINE_DEFAULTS = EngineConfig()  # the flags' defaults are the engine's own
SAMPLING_DEFAULTS = SamplingParams()  # ... and the sampling flags' are SamplingParams'
AUTO_STOP_RULE = "auto"  # --stop-rule's default: `resolve_run_defaults`
ENGINE_FLAGS = {  # flag -> EngineConfig field
    "--batch-size": "batch_size", "--speculate": "drafter", "--draft-length": "draft_length",
    "--draft-tokens": "draft_tokens", "--draft-confidence": "draft_confidence", "--draft-stop": "draft_stop",
    "--draft-max-rows": "draft_max_rows", "--batch-invariant": "batch_invariant", "--draft-loop-tokens": "draft_loop_tokens",
    "--kv-cache": "kv_cache",
}
BENCHMARK_HELP = ("humaneval, mbpp, mbpp+ (MBPP with EvalPlus' extra tests), MBXP's mbjsp (JavaScript), mbgp (Go), "
                  "mbcpp (C++), mbjp (Java), or a HumanEval-format .jsonl file")


def add_benchmark_args(parser: argparse.ArgumentParser, partial: bool = True) -> None:
    parser.add_argument("--benchmark", default="humaneval",
                        help=BENCHMARK_HELP)
    parser.add_argument("--split", default=None,
                        help="MBPP split (MBPP and MBXP, by task number): test (default), validation, train, fewshot, all")
    parser.add_argument("--tasks", default=None, help="task ids or numbers, e.g. '0,3,10-12'")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N problems")
    if partial:
        parser.add_argument("--partial", action="store_true", help="ReCode partial-code prompts")


BACKEND_HELP = {"hf": "hf: Hugging Face generate", "quench": "quench: quench's engine (docs/engine.md)",
                "openai": "openai: an OpenAI-compatible server at --base-url (docs/serving.md)"}


def add_model_args(parser: argparse.ArgumentParser, backends: tuple[str, ...] = ("hf", "quench", "openai"),
                   engines: bool = True, batch_size: int = ENGINE_DEFAULTS.batch_size, auto: bool = False,
                   speculate_help: str | None = None) -> None:
    """The model flags; `backends` and `engines` (several engine processes) are those the command accepts,
    so that its help lists nothing it would refuse; `batch_size`: the command's default slots; `auto`: engines,
    batch size and speculation default to `auto`, chosen from the work and the machine (`work_settings`);
    `speculate_help`: --speculate defaults to `auto`, which means what this text says (`quench serve`'s)."""
    add_loading_args(parser)
    if len(backends) > 1:
        parser.add_argument("--backend", default="quench", choices=backends,
                            help="; ".join(BACKEND_HELP[name] for name in backends))
    else:
        parser.set_defaults(backend=backends[0])
    add_batch_size_arg(parser, batch_size, auto)
    if engines:
        add_engines_arg(parser, auto)
    else:
        parser.set_defaults(engines="1")
    engine = parser.add_argument_group("quench engine")
    add_speculation_args(engine, auto, speculate_help)
    add_engine_args(engine)
    if "openai" in backends:
        remote.add_openai_args(parser)


def add_loading_args(parser: argparse.ArgumentParser) -> None:
    """Which model loads, how and where: --model, --dtype, --weights, --device, --prompt-format."""
    parser.add_argument("--model", default=DEFAULT_PRESET, help="preset, HF model directory, or .gguf file")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16, float32")
    parser.add_argument("--weights", default="auto", choices=["auto", "dequantized", "gguf", "gguf-int8"],
                        help="GGUF models: gguf-int8 (the projections and head run on the file's blocks as stored "
                             "times 8-bit activations, integer sums), gguf (the blocks, float32 activations) or "
                             "dequantized (weights dequantized once, --dtype's); auto (default): gguf-int8 for a "
                             "preset or .gguf file on a CPU with quench's native kernels, else dequantized "
                             "(docs/engine.md)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--prompt-format", default=None, choices=["chat", "completion"],
                        help="default: the preset's, or what a quench checkpoint records, else completion")


def add_batch_size_arg(parser: argparse.ArgumentParser, batch_size: int, auto: bool) -> None:
    """--batch-size: the rows decoded together (`auto`: chosen from the work, `work_settings`)."""
    if auto:
        parser.add_argument("--batch-size", type=work_settings.batch_size_value, default=work_settings.AUTO,
                            metavar="N|auto", help="rows decoded together (default auto: each engine's share of the "
                                                   f"samples, a power of two from {work_settings.MIN_AUTO_BATCH} to "
                                                   f"{work_settings.MAX_AUTO_BATCH})")
    else:
        parser.add_argument("--batch-size", type=int, default=batch_size,
                            help="rows decoded together (default %(default)s)")


def add_engines_arg(parser: argparse.ArgumentParser, auto: bool) -> None:
    """--engines: generation processes on this machine."""
    parser.add_argument("--engines", default=work_settings.AUTO if auto else "1", metavar="N|auto",
                        help="generation processes on this machine, each with its own model and --threads/N torch "
                             "threads (auto: one per thread on a CPU where each gets at least "
                             f"{work_settings.MIN_ROWS_PER_ENGINE} samples and memory holds their models; default "
                             "%(default)s); on a CPU several one-thread engines decode more than one engine with "
                             "several threads (docs/engine.md, Engine processes)")


def add_speculation_args(engine: argparse._ArgumentGroup, auto: bool, auto_help: str | None = None) -> None:
    """The engine's speculative decoding flags: --speculate, --draft and the drafting knobs; `auto_help`: --speculate
    defaults to `auto`, which means what it says (else `auto` follows `auto`)."""
    auto = auto or auto_help is not None
    auto_help = auto_help or ("hybrid for greedy runs where a draft is shipped for the model, else ngram, none for "
                              "sampled runs (whose acceptance test is not one arithmetic order on every CPU)")
    engine.add_argument("--speculate", default=work_settings.AUTO if auto else ENGINE_DEFAULTS.drafter,
                        choices=(work_settings.AUTO, *DRAFTERS) if auto else DRAFTERS,
                        help="speculative decoding: ngram = prompt lookup, draft = a draft model (--draft), hybrid = "
                             f"prompt lookup where it matches, else the draft model; auto: {auto_help} "
                             "(default %(default)s)")
    engine.add_argument("--draft", default="auto", metavar="auto|PATH",
                        help="draft model for --speculate draft or hybrid (auto: the one shipped for the preset); "
                             "a PATH without one of them is refused")
    engine.add_argument("--draft-tokens", type=int, default=ENGINE_DEFAULTS.draft_tokens,
                        help="fixed draft length, or where BASS's length starts (default %(default)s)")
    engine.add_argument("--draft-length", default=None, choices=DRAFT_LENGTHS,
                        help="measured: the length that the engine's own step times and acceptance say pays most (0: "
                             "no draft); bass: BASS's dynamic length; fixed: --draft-tokens (default: measured for "
                             "prompt lookup, bass with a draft model)")
    engine.add_argument("--draft-confidence", type=float, default=ENGINE_DEFAULTS.draft_confidence, metavar="P",
                        help="draft model: end a row's draft before a token the draft gives probability < P "
                             "(default %(default)s: never)")
    engine.add_argument("--draft-stop", type=float, default=None, metavar="P",
                        help="draft model: end a row's draft, past its floor, once the product of its tokens' draft "
                             f"probabilities falls below P (0: never; default: {drafting_defaults(1).draft_stop} at "
                             f"batch 1, {drafting_defaults(2).draft_stop} above)")
    engine.add_argument("--draft-loop-tokens", type=int, default=ENGINE_DEFAULTS.draft_loop_tokens, metavar="N",
                        help="prompt lookup: a row whose output is in a repetition loop drafts N tokens of the "
                             f"loop's continuation, whatever the draft length (default %(default)s; 0: off; at most "
                             f"{MAX_LOOP_TOKENS}); the output is unchanged")
    engine.add_argument("--draft-max-rows", type=int, default=ENGINE_DEFAULTS.draft_max_rows, metavar="N",
                        help="speculation pauses (regular steps) while more than N rows are live (0: never; "
                             "default %(default)s: past that drafts cost more than they save)")


def add_engine_args(engine: argparse._ArgumentGroup) -> None:
    """The engine's other flags: --batch-invariant, --kv-cache and --guard."""
    engine.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=ENGINE_DEFAULTS.batch_invariant,
                        help="every token's logits bit-identical at any batch size, position, speculation setting and "
                             "thread count (docs/engine.md, Batch invariance). Default: on wherever the kernels serve "
                             "the model (Llama's layer, float32 or bfloat16, native kernels built), else off with a "
                             "warning; --batch-invariant: an error where they cannot; --no-batch-invariant: off")
    engine.add_argument("--kv-cache", default=ENGINE_DEFAULTS.kv_cache, choices=KV_CACHES,
                        help="the KV caches' dtype. bfloat16 under a float32 model: half the bytes each attention "
                             "step reads, keys and values rounded as they are written (a numeric mode of its own: "
                             "other tokens than float32 caches); batch-invariant runners only. Default %(default)s: "
                             "bfloat16 under the GGUF weights (--weights gguf or gguf-int8) wherever served, else the "
                             "model's dtype (docs/engine.md, KV caches)")
    engine.add_argument("--guard", default=None, metavar="auto|PATH",
                        help="GenGuard early stopping from the model's hidden state (auto: the shipped guard)")


def add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--samples", type=int, default=1, help="samples per problem")
    parser.add_argument("--temperature", type=float, default=SAMPLING_DEFAULTS.temperature, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=SAMPLING_DEFAULTS.top_p, help="nucleus sampling (default %(default)s: off)")
    parser.add_argument("--top-k", type=int, default=SAMPLING_DEFAULTS.top_k,
                        help="sample from the k likeliest tokens (default %(default)s: off)")
    parser.add_argument("--max-new-tokens", type=int, default=SAMPLING_DEFAULTS.max_new_tokens, help="default %(default)s")
    parser.add_argument("--stop", action="append", default=None, help="a stop sequence (repeatable); default per benchmark")
    parser.add_argument("--stop-rule", default=AUTO_STOP_RULE, choices=(AUTO_STOP_RULE, *STOP_RULES), metavar="RULE",
                        help=f"auto or one of {', '.join(STOP_RULES)} (default %(default)s). function: stop an answer "
                        "once its function is complete; loop: once it only repeats itself (its last 300 characters "
                        "equal those one period earlier, or its last 200 over 4 periods do but for their numbers); "
                        "function,loop: either (docs/stopping.md); auto: loop for greedy answers (one that only "
                        "repeats itself would repeat to the token limit), none for sampled ones, and a resumed run's "
                        "own rule; the hf backend cuts the text after generation instead")
    parser.add_argument("--seed", type=int, default=SAMPLING_DEFAULTS.seed, help="sampling seed (default %(default)s)")


def add_execution_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    parser.add_argument("--timeout", type=float, default=SandboxLimits.timeout_s, metavar="SECONDS",
                        help="T_base: the floor of each problem's wall-clock limit per program (default "
                             "%(default)s); with --timeout-factor 0, every program's limit")
    parser.add_argument("--timeout-factor", type=float, default=LIMIT_FACTOR, metavar="K",
                        help="each problem's programs may take max(T_base, K x its reference solution's time, "
                             "measured here once before the samples run) (default %(default)g, evalplus'); "
                             "recorded in config.json and reused on resume; 0: the fixed --timeout for every program. "
                             "A problem without a reference gets T_base; MBPP+ limits each input from its "
                             "reference's time instead")
    parser.add_argument("--k", default=None,
                        help="pass@k values, each at most the samples per problem (default: those of 1,10,100 it allows)")
    add_unconfined_arg(parser)


def add_unconfined_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unsafe-unconfined", action="store_true",
                        help="run programs even where quench cannot confine them (no working bubblewrap, no user to "
                             "drop to): they could read, change and delete your files; recorded in config.json")


def add_ray_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                        help="spread generation and execution over a Ray cluster (docs/ray.md)")
    parser.add_argument("--replicas", "--ray-actors", dest="ray_actors", type=int, default=None, metavar="N",
                        help="engine replicas (generation actors) on the cluster, as in `quench serve --replicas` "
                             "(--ray-actors: the same; default: one per GPU, else per CPU)")
    parser.add_argument("--cpus-per-replica", "--ray-cpus-per-actor", dest="ray_cpus_per_actor", type=float, default=1.0,
                        metavar="C", help="CPUs (torch threads) per replica, as in `quench serve` (--ray-cpus-per-actor: "
                                          "the same)")
