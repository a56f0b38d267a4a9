"""Verification of a diagnosis draft before anything is released."""
