"""Run-level code: the JSONL sample store with resume, generation and evaluation runs, time-budget runs,
and building a backend from its options."""
