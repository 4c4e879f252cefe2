"""Graph layer: the graph IR, the op registry, the reference executor and graph passes."""
