"""The speculative decoding engine and its measurements. Imports only `heads` of drafthub."""
