"""Cloud node scaling: the local provider (machines are network namespaces on a bridge running
their user data), the bootstrap every cloud machine joins with, and what builds on them."""
