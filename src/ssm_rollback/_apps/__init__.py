"""Applications built on the library's public surface: the demos and the depth simulation.

They import only public names (and each other); ``cli`` runs them.
"""
