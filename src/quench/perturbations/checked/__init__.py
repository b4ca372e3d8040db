"""The transformations of profile "quench", each checked: no solution leaks into a prompt, every output compiles,
and the meaning check drops a variant that fails it. `quench.perturbations.catalog` names them."""
