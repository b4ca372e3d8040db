"""Profile "recode": ReCode's transformations reproduced byte for byte where they differ from quench's
(NL-Augmenter's docstring edits, NatGen's code syntax formatted with black, text-level format edits).
`quench.perturbations.catalog` names them."""
