"""Simulation: how long an MSCCL program takes on a machine, per call size, and where the time goes."""
