"""specscribe: real-time speech recognition and translation with speculative Whisper decoding.

The code lives in three sub-packages, mapped from the repository's top-level folders:
``specscribe.models`` (models/), ``specscribe.pipeline`` (pipeline/), ``specscribe.web`` (web/).
"""

__version__ = "0.1.0"
