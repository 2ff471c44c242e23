"""gems-conformance: the suite a chip vendor runs to certify a gems backend."""

__version__ = "0.1.0"
