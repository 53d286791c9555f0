# rebench CPU base: Debian with Python 3.11, sshd, user `agent` (uid 1000), group
# `protected`, /protected closed to the agent, the scoring helper and the environment kit.
# Scoring runs as `scorer` (uid 1002, with `protected`) and the submitted code it runs as
# `subject` (uid 1003): neither is the agent, so the agent cannot trace or signal them.
#
# BASE_IMAGE is a build argument so that hosts without a registry can use the
# image made by `rebench images bootstrap` (debootstrap + docker import), which
# already has python3, python3-venv, openssh-server and ca-certificates; from a
# registry image they are installed here instead.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# An extra CA bundle for TLS-inspecting proxies (empty file when not needed).
COPY extra-ca.crt /usr/local/share/ca-certificates/rebench-extra.crt
RUN set -eu; \
    if ! command -v python3 >/dev/null || ! python3 -c "import venv, ensurepip" 2>/dev/null \
       || [ ! -x /usr/sbin/sshd ] || [ ! -d /etc/ssl/certs ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv openssh-server ca-certificates procps; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    if [ ! -s /usr/local/share/ca-certificates/rebench-extra.crt ]; then \
        rm -f /usr/local/share/ca-certificates/rebench-extra.crt; \
    fi; \
    update-ca-certificates >/dev/null 2>&1 || true; \
    groupadd --gid 1001 protected; \
    useradd --uid 1000 --user-group --create-home --shell /bin/bash agent; \
    useradd --uid 1002 --user-group --create-home --shell /usr/sbin/nologin scorer; \
    useradd --uid 1003 --user-group --create-home --shell /usr/sbin/nologin subject; \
    chmod 0700 /home/scorer /home/subject; \
    mkdir -p /protected/results /opt/rebench /run/sshd; \
    chown root:protected /protected /protected/results; \
    chmod 2770 /protected /protected/results; \
    chmod 0755 /home/agent; \
    # Debian's other world-writable folders: nothing of the agent's belongs beside what root uses
    # (the agent has its home, /tmp and /dev/shm; tests/adversarial walks the image as the agent).
    chmod 0755 /var/tmp /run/lock; \
    python3 -m venv /opt/venv; \
    rm -rf /root/.cache

# The protected harness folder: the scoring helper and the environment kit (rebench/kit),
# root's and read-only to everyone else. The .pth lets `python score.py`, run by hand, import
# the kit; the scorer finds it first on its path anyway (the helper's own folder).
COPY harness/ /opt/rebench/
RUN chown -R root:root /opt/rebench && chmod -R 0755 /opt/rebench; \
    echo /opt/rebench > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rebench-kit.pth"

ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1
LABEL rebench.base=cpu
WORKDIR /
