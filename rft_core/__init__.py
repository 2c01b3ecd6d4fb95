"""rft_core: a Trinity-RFT compatible reinforcement fine-tuning engine on Ray.

Never imports Django. Public entry points take config objects and plain paths; failures a user
can cause raise subclasses of :class:`rft_core.errors.RFTError`, which the CLI turns into one
clear line and a non-zero exit.
"""

__version__ = "0.1.0"
