"""colls: a collective algorithm compiler (hardware profile in, proven-correct MSCCL XML out)."""

__version__ = "0.1.0"
