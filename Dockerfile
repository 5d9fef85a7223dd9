# One image for every GridStat role: `gridstat router|broker|parent|condense host|...` and
# `gridstat-operator`. Built by scripts/build-image.sh from a Debian base made locally with
# debootstrap (local/debian:bookworm): no registry is needed. Python packages come from PyPI,
# pinned by services/constraints.txt.
#
# Two stages: the builder trusts the build host's extra CA certificates (deploy/image/ca/, filled
# in the build context by build-image.sh; empty in git) to reach PyPI; the image itself does not.
ARG BASE=local/debian:bookworm

FROM ${BASE} AS builder
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/gridstat/bin:$PATH
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates \
    && python3 -m venv /opt/gridstat
COPY deploy/image/ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# Dependencies first (a layer that changes only with the pins), then the code. The extras: `fast`
# (uvloop) and `sttp` (sttpapi and numpy, for `gridstat sttp-server` and `sttp-gateway`, docs/sttp.md).
COPY services/pyproject.toml services/constraints.txt /src/services/
COPY operator/pyproject.toml /src/operator/
RUN python3 -c 'import tomllib; \
deps = [d for p in ("/src/services/pyproject.toml", "/src/operator/pyproject.toml") \
        for d in (lambda t: t["dependencies"] + [d for x in ("fast", "sttp") \
                                                 for d in t.get("optional-dependencies", {}).get(x, [])])( \
            tomllib.load(open(p, "rb"))["project"]) if not d.startswith("gridstat")]; \
print("\n".join(deps))' > /tmp/requirements.txt \
    && pip install -q -c /src/services/constraints.txt -r /tmp/requirements.txt
COPY services /src/services
COPY operator /src/operator
RUN pip install -q --no-deps /src/services /src/operator \
    && python3 -m pip uninstall -q -y pip setuptools wheel
# The runtime stage gets the venv without its installers: no pip, setuptools or wheel. The entry
# points (`gridstat`, `gridstat-operator`) are plain scripts pip wrote at install time.

FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/gridstat/bin:$PATH
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends python3 ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 gridstat \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/gridstat --create-home \
               --shell /usr/sbin/nologin gridstat
COPY --from=builder /opt/gridstat /opt/gridstat
# User and group 10001:10001 (the chart's podSecurityContext, docs/kubernetes.md); both entry
# points start; neither the venv nor the system Python can import an installer.
RUN test "$(id -u gridstat):$(id -g gridstat)" = "10001:10001" \
    && gridstat --help >/dev/null && gridstat-operator --help >/dev/null \
    && python3 -c "import gridstat_operator.handlers, sttp.subscriber" \
    && for py in python3 /usr/bin/python3; do \
         $py -c 'import importlib.util as u, sys; \
bad = [m for m in ("pip", "setuptools", "wheel", "pkg_resources") if u.find_spec(m)]; \
sys.exit("installers in the runtime image: %s" % bad if bad else 0)' || exit 1; \
       done \
    && ! ls /opt/gridstat/bin | grep -q '^pip'
USER 10001:10001
WORKDIR /var/lib/gridstat
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["gridstat", "--help"]
