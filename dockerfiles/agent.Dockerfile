# An installed agent's layer on top of an environment's image (rebench.images.agent_layer): its Debian
# packages, its npm packages installed globally (pinned) and its pip packages in their own venv, all
# root's and read-only to everyone else (the agent's uid must not be able to change a program that
# root or the scorer may run). npm and pip trust the system CA bundle, which the base image built
# from the host's (TLS-inspecting proxies).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG AGENT
ARG APT_PACKAGES=""
ARG NPM_PACKAGES=""
ARG PIP_PACKAGES=""
RUN set -eu; \
    if [ -n "${APT_PACKAGES}" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${APT_PACKAGES}; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    if [ -n "${NPM_PACKAGES}" ]; then \
        NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt npm_config_cafile=/etc/ssl/certs/ca-certificates.crt \
        npm install -g --no-audit --no-fund --no-update-notifier --prefix /usr/local ${NPM_PACKAGES}; \
    fi; \
    if [ -n "${PIP_PACKAGES}" ]; then \
        python3 -m venv /opt/agent-venv; \
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/agent-venv/bin/pip install --no-cache-dir ${PIP_PACKAGES}; \
        ln -sf /opt/agent-venv/bin/* /usr/local/bin/ 2>/dev/null || true; \
    fi; \
    for dir in /usr/local /opt/agent-venv; do \
        [ -d "$dir" ] && chown -R root:root "$dir" && chmod -R go-w "$dir"; \
    done; \
    rm -rf /root/.npm /root/.cache /tmp/* /home/agent/.npm
LABEL rebench.agent=${AGENT}
