"""The recorder: samples every second into the store, within its own CPU and memory budget."""
