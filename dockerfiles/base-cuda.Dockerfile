# rebench CUDA base for `paper` profiles: the CPU base plus what GPU code needs
# besides the driver (which the NVIDIA container runtime injects): a C compiler
# and Python headers for Triton's JIT launcher. CUDA runtime libraries come with
# the environment's PyTorch wheels (nvidia-* packages), so no CUDA image is needed.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN set -eu; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev python3-dev git; \
    rm -rf /var/lib/apt/lists/*
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL rebench.base=cuda
