"""The server's side of the decode loop: the live queue of requests, the continuously batched loop over it and chunked prefill."""
