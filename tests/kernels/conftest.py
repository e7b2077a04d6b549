import os

# Triton chooses interpreter or compiler when it is first imported, so the flag
# must be in place before any test module (or transformers' modeling code,
# which imports triton) is imported. TRITON_INTERPRET=0 on a CUDA machine runs
# the kernel tests compiled on the GPU instead.
os.environ.setdefault("TRITON_INTERPRET", "1")
