"""The SDK version, in a leaf module (no imports): inner modules read it from here."""

__version__ = "0.1.0"
