"""One open recording's documents, what cli/ and web/ show: explained incidents (found once per
range read), flame graphs, their diffs and heatmaps. Each takes an open StoreReader (or the
Recording read through it), so a request opens the store once and the views only ask and print."""
