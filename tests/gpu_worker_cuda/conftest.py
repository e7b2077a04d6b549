import os

# Triton picks interpreter or compiler at its first import: without a GPU the
# Triton attention and kernels run in its CPU interpreter. TRITON_INTERPRET=0
# on a CUDA machine runs them compiled.
os.environ.setdefault("TRITON_INTERPRET", "0" if os.environ.get("CUDA_VISIBLE_DEVICES", "x") != "" and
                      os.path.exists("/dev/nvidiactl") else "1")
