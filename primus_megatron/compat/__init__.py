"""Megatron-core version differences and CPU/gloo shims."""
