"""The nursery tree: every long-running activity of an operator, one module each.

Only this layer (and the test kit) opens nurseries. ``operator.py`` shows the whole tree.
"""
