# One environment, one profile: the base plus a layer many environments share, the environment's Debian packages
# (system-packages.txt: rustc, say; empty for most), its Python requirements (from a local wheelhouse first, then the index) and its files and
# built assets under /opt/rebench/env, closed to the agent (the harness copies
# them into place when an attempt starts).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
# The requirements most environments pin alike (PyTorch, NumPy: rebench/images/wheels.py), first
# and before any ARG (a build arg's value is part of each later step's cache key): environments
# that pin them the same build this layer once, and their images share it.
COPY shared-wheels/ /tmp/rebench-shared-wheels/
COPY shared-requirements.txt /tmp/rebench-shared-requirements.txt
RUN set -eu; \
    if grep -qv '^\s*\(#.*\)\?$' /tmp/rebench-shared-requirements.txt; then \
        pip install --no-cache-dir --no-index --find-links /tmp/rebench-shared-wheels \
            -r /tmp/rebench-shared-requirements.txt; \
    fi; \
    rm -rf /tmp/rebench-shared-wheels /tmp/rebench-shared-requirements.txt /root/.cache
ARG ENVIRONMENT
ARG PROFILE
ARG CONTENT_HASH
ARG PIP_OFFLINE=
COPY system-packages.txt /tmp/rebench-system-packages.txt
RUN set -eu; \
    packages=$(sed -e 's/#.*//' /tmp/rebench-system-packages.txt | tr -s ' \n' ' '); \
    if [ -n "${packages# }" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    rm -f /tmp/rebench-system-packages.txt
COPY wheels/ /tmp/rebench-wheels/
COPY requirements.txt /tmp/rebench-requirements.txt
RUN set -eu; \
    if grep -qv '^\s*\(#.*\)\?$' /tmp/rebench-requirements.txt; then \
        pip install --no-cache-dir ${PIP_OFFLINE:+--no-index} --find-links /tmp/rebench-wheels \
            -r /tmp/rebench-requirements.txt; \
    fi; \
    rm -rf /tmp/rebench-wheels /tmp/rebench-requirements.txt /root/.cache
COPY env/ /opt/rebench/env/
RUN chown -R root:root /opt/rebench/env && chmod 0700 /opt/rebench/env
LABEL rebench.environment=${ENVIRONMENT} rebench.profile=${PROFILE} rebench.content-hash=${CONTENT_HASH}
