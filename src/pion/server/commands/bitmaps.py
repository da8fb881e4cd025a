"""bitmaps commands (not yet written)."""
