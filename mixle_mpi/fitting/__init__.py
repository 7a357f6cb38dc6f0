"""The EM loop with exact checkpoints, the built-in test job and models, the reference fit and
progress lines. Never imports ``cli``."""
