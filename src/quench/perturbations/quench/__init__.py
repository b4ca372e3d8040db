"""Profile "quench": quench's checked transformations (no solution leaks into prompts, every output
compiles, the meaning check drops what fails). `quench.perturbations.catalog` names them."""
