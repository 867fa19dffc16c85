# syntax=docker/dockerfile:1
#
# holdfast's two images, for teams that build with Docker (BuildKit, for the
# heredocs) or Podman. CI does not build this file: it builds the images with
# `make image`, in Go, without a Docker engine (deploy/image). This file makes
# the same layout (paths, user, environment, ports, labels), which
# deploy/image's tests check instruction by instruction; docs/images.md.
#
#   docker build --target api -t holdfast/api:dev \
#     --build-arg VERSION=$(git describe --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) .
#   docker build --target worker -t holdfast/worker:dev --build-arg … .

FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# The context keeps .git (.dockerignore), so that -buildvcs stamps the commit
# that --version and /healthz name. Static, with the time zone database
# inside: the images have neither a libc nor /usr/share/zoneinfo.
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags timetzdata -o /out/holdfast-api ./cmd/api
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags timetzdata -o /out/holdfast-worker ./cmd/worker

# No base image: no shell, no package manager, nothing but these files.
FROM scratch AS base
COPY <<EOF /etc/passwd
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
EOF
COPY <<EOF /etc/group
root:x:0:
nonroot:x:65532:
EOF
# For TLS to a managed Postgres or Redis.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.source="https://github.com/holdfast/holdfast" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
USER 65532:65532
WORKDIR /
ENV PATH=/usr/local/bin

FROM base AS worker
COPY --from=build /out/holdfast-worker /usr/local/bin/holdfast-worker
LABEL org.opencontainers.image.title="holdfast-worker" \
      org.opencontainers.image.description="holdfast worker: applies accepted reservations per key, in batches"
# /healthz, /readyz and /metrics on every address, not loopback.
ENV WORKER_ADDR=:8081
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/holdfast-worker"]

# The last stage: what `docker build .` builds.
FROM base AS api
COPY --from=build /out/holdfast-api /usr/local/bin/holdfast-api
LABEL org.opencontainers.image.title="holdfast-api" \
      org.opencontainers.image.description="holdfast API: takes reservations (202 Accepted), serves reads, long polls and the pages"
# The API on every address, not loopback; Asynqmon and /metrics on ports of
# their own.
ENV HTTP_ADDR=:8080 MONITORING_ADDR=:8082 METRICS_ADDR=:8083
EXPOSE 8080 8082 8083
ENTRYPOINT ["/usr/local/bin/holdfast-api"]
