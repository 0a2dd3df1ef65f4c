# syntax=docker/dockerfile:1
# One image for both subcommands: `confighash webhook` and `confighash watcher`.
# The binary is the one `make build` produces: static (CGO off), trimmed, version
# stamped.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

# distroless/static: no shell, no package manager; runs as the nonroot user. The
# layout is the one `make image` builds with ko, without a Docker engine
# (tests/image checks that both agree).
FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639
COPY --from=build /src/bin/confighash /ko-app/confighash
USER 65532:65532
ENTRYPOINT ["/ko-app/confighash"]
