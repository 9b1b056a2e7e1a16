"""Errors with a one-line message meant for the user."""


class ModelError(Exception):
    """A model that is missing, corrupt or not a Whisper model; the message says how to fix it."""
