"""The shipped communication sketches (this folder is installed as the data package colls.sketches)."""
