"""Model runners: the Llama-family fast path (its forward plan, layers and families) and the generic Hugging Face runner."""
