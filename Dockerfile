# g4tp serve in a container (docs/deploy.md). Multi-stage: a build stage with the toolchain, a
# slim runtime stage with only the runtime libraries, the binary and the demo model.
#   docker build -t g4tp .                        # the server (no MPI)
#   docker build --target mpi -t g4tp:mpi .       # with OpenMPI: one container per host
#   docker run -p 8080:8080 -v /models/gemma-4-31B-it:/models:ro g4tp
# Without a mounted model (no /models/config.json) the built-in demo model is served.
# Where no registry is reachable, local base images: packaging/base-images.sh, then
#   docker build --build-arg BASE=g4tp-base:build --build-arg RUNTIME_BASE=g4tp-base:runtime .
ARG BASE=debian:bookworm
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${BASE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/
# installs nothing when the base already holds the build dependencies (no network needed then)
RUN scripts/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY Makefile ./
COPY fuzz/fuzz.mk fuzz/
COPY include include
COPY src src
COPY scripts/embed-files.sh scripts/
COPY packaging packaging
COPY models/demo models/demo
# the server without MPI (no libmpi at run time), and with it for the MPI variant
RUN make -j"$(nproc)" BUILD=build-nompi MPI_CFLAGS= MPI_LIBS= build-nompi/g4tp \
 && if command -v mpicc >/dev/null; then make -j"$(nproc)" BUILD=build-mpi build-mpi/g4tp; fi \
 && make BUILD=build-nompi MPI_CFLAGS= MPI_LIBS= install-bin PREFIX=/usr/local DESTDIR=/out \
 && { [ ! -x build-mpi/g4tp ] || install -m 755 build-mpi/g4tp /out/usr/local/bin/g4tp-mpi; } \
 && strip /out/usr/local/bin/g4tp*

FROM ${RUNTIME_BASE} AS runtime
# only the runtime libraries; apt runs only for what the base lacks
RUN set -e; need=""; \
    for p in libjansson4 libxxhash0 libmicrohttpd12 libpng16-16 libjpeg62-turbo libwebp7 libwebpdemux2 libcurl4; do \
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"; \
    done; \
    if [ -n "$need" ]; then apt-get update && apt-get install -y --no-install-recommends $need && rm -rf /var/lib/apt/lists/*; fi; \
    useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin g4tp; \
    mkdir -p /models
COPY --from=build /out/usr/local/bin/g4tp /usr/local/bin/g4tp
COPY --from=build /out/usr/local/share/g4tp /usr/local/share/g4tp
COPY packaging/entrypoint.sh /usr/local/bin/g4tp-entrypoint
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="g4tp" \
      org.opencontainers.image.description="Tensor-parallel inference for Gemma-4 31B in C: an OpenAI-compatible HTTP server" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="NOASSERTION" \
      org.opencontainers.image.documentation="docs/deploy.md"
# docs/server.md: flags win over these; MODEL_DIR falls back to the demo model when empty
ENV HOST=0.0.0.0 PORT=8080 MODEL_DIR=/models TP_DEGREE= KV_MAX= API_KEY=
EXPOSE 8080
USER g4tp
# a 31B load (62 GB of bf16 weights mapped, first pages read) takes minutes on a cold page cache
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${PORT:-8080} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/g4tp-entrypoint"]
CMD []

# The MPI variant: OpenMPI's runtime and ssh (mpirun starts the other hosts' daemons over ssh);
# one container per host, --network host. Recipe: docs/deploy.md, "MPI across hosts".
FROM runtime AS mpi
USER root
RUN set -e; need=""; \
    for p in openmpi-bin libopenmpi3 openssh-client openssh-server; do \
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"; \
    done; \
    if [ -n "$need" ]; then apt-get update && apt-get install -y --no-install-recommends $need && rm -rf /var/lib/apt/lists/*; fi; \
    mkdir -p /run/sshd
COPY --from=build /out/usr/local/bin/g4tp-mpi /usr/local/bin/g4tp
USER g4tp

# the default target: the server without MPI
FROM runtime
