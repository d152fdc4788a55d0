"""The ground floor: errors, sizes, device names and the lazy TensorFlow import.

Every other part of the package may import from here; nothing here imports from
the rest of the package.
"""
