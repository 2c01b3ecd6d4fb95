"""RL algorithms as pure tensor functions: advantages, policy losses, KL estimators, entropy,
loss aggregation, and the ``algorithm_type`` presets that combine them."""
