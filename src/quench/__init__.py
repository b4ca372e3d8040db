"""quench: fast, robust evaluation and training of code-generation LLMs."""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
