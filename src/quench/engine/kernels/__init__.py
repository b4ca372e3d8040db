"""Kernels: the C sources (`csrc/`), their build per CPU level and its report, and the Python wrappers over them (fixed-order GEMM, GGUF block products, the screened head, linear layers)."""
